// check_records (see manifest.h): what a manifest's records must satisfy beyond their JSON types, so
// that verify reports a hand-edited or hostile manifest as BAD instead of OK, consolidate never writes
// a safetensors header Python's safetensors rejects (duplicate names, negative or overflowing shapes,
// shapes that do not match their bytes), and resume never reads past what a record promises. Each
// refusal is an I/O error (ErrorKind::kIO): such a manifest is damaged, whoever damaged it.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/counter_values.h"
#include "checkpoint/manifest.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

// Bytes of `shape` in elements of `element` bytes; throws (starting with `here`) for a negative
// dimension or a size past int64.
int64_t shape_bytes(const std::vector<int64_t>& shape, int64_t element, const std::string& here) {
  int64_t bytes = element;
  for (int64_t d : shape) {
    COHORT_CHECK_KIND(kIO, d >= 0, here, ": shape ", excerpt(shape_text(shape)), " has a negative dimension");
    COHORT_CHECK_KIND(kIO, !__builtin_mul_overflow(bytes, d, &bytes), here, ": shape ", excerpt(shape_text(shape)),
                      " holds more bytes than a 64-bit size counts");
  }
  return bytes;
}

void check_pieces(const TensorRecord& r, int64_t element, const std::string& here) {
  COHORT_CHECK_KIND(kIO, !r.pieces.empty(), here, ": it has no pieces");
  std::set<int> per_rank;
  int64_t total = 0;
  for (const Piece& p : r.pieces) {
    int64_t bytes = 0;
    COHORT_CHECK_KIND(kIO, !__builtin_mul_overflow(p.numel, element, &bytes) && bytes == p.nbytes, here,
                      ": a piece of ", p.numel, " elements holds ", p.nbytes, " bytes, not ", element, " per element");
    COHORT_CHECK_KIND(kIO, !__builtin_add_overflow(total, p.nbytes, &total), here,
                      ": its pieces hold more bytes than a 64-bit size counts");
    if (r.kind != StateKind::kPerRank) continue;
    COHORT_CHECK_KIND(kIO, per_rank.insert(p.rank).second, here, ": rank ", p.rank, " has two per-rank pieces");
    COHORT_CHECK_KIND(kIO, shape_bytes(p.shape, element, here) == p.nbytes, here, ": rank ", p.rank, "'s shape ",
                      excerpt(shape_text(p.shape)), " is not its ", p.nbytes, " bytes");
  }
  if (r.kind == StateKind::kPerRank) return;
  const int64_t bytes = shape_bytes(r.shape, element, here);
  COHORT_CHECK_KIND(kIO, bytes == total, here, ": shape ", excerpt(shape_text(r.shape)), " is ", bytes,
                    " bytes, its pieces hold ", total);
}

}  // namespace

void check_records(const Manifest& m, const std::string& where) {
  std::set<std::string> names, consolidated;  // the records' names; the names consolidate gives them
  std::map<std::string, int> file_rank;
  for (const FileRecord& f : m.files) file_rank[f.name] = f.rank;
  for (const TensorRecord& r : m.tensors) {
    const std::string here = where + ": tensor '" + excerpt(r.name) + "'";
    // A piece lies in its writer's shard (hostile pass 12, m-3: halves moved between files passed).
    for (const Piece& p : r.pieces) {
      const auto file = file_rank.find(p.file);
      COHORT_CHECK_KIND(kIO, file != file_rank.end(), here, ": a piece lies in file '", excerpt(p.file),
                        "', which is not in 'files'");
      COHORT_CHECK_KIND(kIO, file->second == p.rank, here, ": a piece of rank ", p.rank, " lies in file '",
                        excerpt(p.file), "', rank ", file->second, "'s");
    }
    COHORT_CHECK_KIND(kIO, !r.name.empty() && r.name != "__metadata__", here, ": not a tensor name");
    COHORT_CHECK_KIND(kIO, names.insert(r.name).second, here, " is listed twice");
    if (r.kind == StateKind::kSharded) {
      COHORT_CHECK_KIND(kIO, shape_bytes(r.shape, 1, here) == r.flat_numel, here,
                        ": a sharded tensor's shape is its whole shape, of flat_numel elements, not ",
                        excerpt(shape_text(r.shape)), " with flat_numel ", r.flat_numel);
    }
    // One rank writes a replicated or owned tensor whole: more pieces, or one at an offset, verified
    // and consolidated while the load read the first piece as the whole (hostile pass 12, M-1).
    const bool whole = r.kind == StateKind::kReplicated || r.kind == StateKind::kOwned;
    COHORT_CHECK_KIND(kIO, !whole || r.pieces.size() <= 1, here, ": a ", kind_name(r.kind),
                      " tensor is written whole, in one piece; it has ", r.pieces.size());
    COHORT_CHECK_KIND(kIO, !whole || r.pieces.empty() || r.pieces[0].offset == 0, here, ": a ", kind_name(r.kind),
                      " tensor's piece begins at element 0, not ", r.pieces.empty() ? 0 : r.pieces[0].offset);
    check_pieces(r, static_cast<int64_t>(c10::elementSize(r.dtype)), here);
    std::vector<std::string> outputs = {r.name};  // its names in a consolidated file
    if (r.kind == StateKind::kPerRank) {
      outputs.clear();
      for (const Piece& p : r.pieces) outputs.push_back(r.name + ".rank" + std::to_string(p.rank));
    }
    for (const std::string& name : outputs) {
      COHORT_CHECK_KIND(kIO, consolidated.insert(name).second, here, ": another tensor is also '", excerpt(name),
                        "' in a consolidated file");
    }
  }
}

std::string mode_name(const std::optional<int>& zero_stage) {
  return zero_stage ? "ZeRO stage " + std::to_string(*zero_stage) : "DDP (no ZeRO engine)";
}

std::optional<int> zero_stage_of(const std::map<std::string, StateValues>& values) {
  for (const auto& [entry, numbers] : values) {
    const auto stage = numbers.find("zero_stage");
    if (stage != numbers.end()) return static_cast<int>(stage->second);
  }
  return std::nullopt;
}

void check_mode(const Manifest& m, const std::string& where) {
  // One fact said twice: the header's (what `cohort-ckpt inspect` shows) and the engine's own (what a
  // resume compares with its run). An edited header would show one mode and resume another.
  for (const auto& [entry, numbers] : m.values) {  // checked before anything casts it to an int
    const auto stage = numbers.find("zero_stage");
    // The engine saves its stage beside its counters: without it a stage-0 engine read as DDP and the
    // resume stopped with "the mode differs", no fallback (hostile pass 10, M6).
    COHORT_CHECK_KIND(kIO, stage != numbers.end() || !has_engine_numbers(numbers), where, ": 'values.", excerpt(entry),
                      "' has the ZeRO engine's numbers but no 'zero_stage'");
    if (stage == numbers.end()) continue;
    const double value = stage->second;
    COHORT_CHECK_KIND(kIO, value == 0 || value == 1 || value == 2 || value == 3, where, ": 'values.", excerpt(entry),
                      ".zero_stage' is ", number_text(value), ", not a ZeRO stage (0 to 3)");
  }
  const std::optional<int> engine_stage = zero_stage_of(m.values);
  COHORT_CHECK_KIND(kIO, m.zero_stage == engine_stage.value_or(0), where, ": 'zero_stage' is ", m.zero_stage,
                    " but the values say ", mode_name(engine_stage));
}

}  // namespace cohort::detail::ckpt
