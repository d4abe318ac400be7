// The write protocol of a save (see save_job.h). (1) rank 0 makes `dir/.step-<n>.tmp`; (2) every rank
// writes its shard file there in parallel and sends rank 0 the records of what it wrote; (3) rank 0
// writes manifest.json, renames the directory to `step-<n>` and only then rewrites `latest`. Each phase
// ends with an allgather of every rank's status, so a failure anywhere raises on all ranks (a dead
// rank is named by Comm) and a crash before (3) leaves `latest` on the previous checkpoint.
#include "checkpoint/save_job.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "checkpoint/commit.h"
#include "checkpoint/entry.h"
#include "checkpoint/files.h"
#include "checkpoint/group.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/part_lender.h"
#include "checkpoint/shard_file.h"
#include "cohort/error.h"
#include "cohort_config.h"
#include "core/check.h"
#include "core/safe_file.h"
#include "world/launch_env.h"

namespace fs = std::filesystem;

namespace cohort::detail::ckpt {
namespace {

// libstdc++'s "filesystem error: cannot rename: Operation not permitted [a] [b]" in cohort's order, as
// its other checkpoint errors say it: the path first, then what failed and why (hostile pass 5, m5).
std::string filesystem_text(const fs::filesystem_error& e) {
  std::string what = e.what();
  const std::string tag = "filesystem error: ";
  if (what.rfind(tag, 0) == 0) what.erase(0, tag.size());
  if (const size_t paths = what.find(" ["); paths != std::string::npos) what.erase(paths);
  std::string paths = e.path1().string();
  if (!e.path2().empty()) paths += " -> " + e.path2().string();
  return paths + ": " + what;
}

void maybe_die_for_test(int rank, int64_t step) {
  const char* spec = std::getenv("COHORT_TEST_KILL_IN_SAVE");
  if (spec == nullptr || detect_launch_env(current_env()).restart_count.value_or(0) != 0) return;
  if (std::to_string(rank) + ":" + std::to_string(step) == spec) ::kill(::getpid(), SIGKILL);
}

// Rank 0 merges every rank's records into one list, checking that each replicated tensor was
// written once and each sharded tensor is covered exactly by the ranks' slices.
std::vector<TensorRecord> merge_records(const std::vector<std::vector<TensorRecord>>& per_rank) {
  std::map<std::string, TensorRecord> merged;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const TensorRecord& record : per_rank[r]) {
      auto [it, fresh] = merged.emplace(record.name, record);
      if (fresh) continue;
      TensorRecord& into = it->second;
      COHORT_CHECK_KIND(kDesync,
                        into.kind == record.kind && into.dtype == record.dtype &&
                            into.flat_numel == record.flat_numel && into.shape == record.shape &&
                            record.kind != StateKind::kReplicated && record.kind != StateKind::kOwned,
                        "ranks disagree about tensor '", record.name, "' (", kind_name(record.kind), " ",
                        dtype_name(record.dtype), " on rank ", r, ", ", kind_name(into.kind), " ",
                        dtype_name(into.dtype), " on rank ", into.pieces[0].rank, ")");
      into.pieces.insert(into.pieces.end(), record.pieces.begin(), record.pieces.end());
    }
  }
  std::vector<TensorRecord> out;
  for (auto& [name, record] : merged) {
    if (record.kind == StateKind::kSharded) {
      std::vector<Slice> slices;
      for (const Piece& p : record.pieces) slices.push_back({p.offset, p.numel});
      plan_slice_copies(slices, 0, record.flat_numel, "sharded tensor '" + name + "'");
    }
    out.push_back(std::move(record));
  }
  return out;
}

}  // namespace

TensorRecord record_of(const Collected& c) {
  const StateTensor& t = c.tensor;
  TensorRecord record;
  record.name = c.name;
  record.kind = t.kind;
  record.dtype = t.tensor.scalar_type();
  dtype_name(record.dtype);  // throws for types a checkpoint cannot hold
  record.shape = t.tensor.sizes().vec();
  if (t.kind == StateKind::kSharded) {
    COHORT_CHECK_KIND(kInvalidArgument,
                      t.tensor.dim() == 1 && t.offset >= 0 && t.offset + t.tensor.numel() <= t.flat_numel,
                      "sharded tensor '", c.name, "' must be 1-D inside [0, flat_numel): offset ", t.offset, ", ",
                      t.tensor.numel(), " elements, flat_numel ", t.flat_numel);
    COHORT_CHECK_KIND(kInvalidArgument, t.whole_shape.empty() || c10::multiply_integers(t.whole_shape) == t.flat_numel,
                      "sharded tensor '", c.name, "': whole_shape ", c10::IntArrayRef(t.whole_shape),
                      " is not of flat_numel ", t.flat_numel, " elements");
    record.flat_numel = t.flat_numel;
    record.shape = t.whole_shape.empty() ? std::vector<int64_t>{t.flat_numel} : t.whole_shape;
  }
  return record;
}

namespace {

// Phase 2 on one rank: the shard file and the records of what is in it.
std::vector<TensorRecord> write_shard(const std::string& path, const std::vector<Collected>& tensors, int rank,
                                      int world_size) {
  ShardWriter writer(path, rank, world_size);
  PartLender lender(/*changes=*/false);  // a part in memory while its tensors are written
  std::vector<TensorRecord> records;
  for (const Collected& c : tensors) {
    TensorRecord record = record_of(c);
    const torch::Tensor live = c.owner != nullptr ? lender.live(*c.owner, c.tensor, c.name) : c.tensor.tensor;
    Piece piece = writer.append(live);
    piece.file = fs::path(path).filename().string();
    piece.offset = c.tensor.kind == StateKind::kSharded ? c.tensor.offset : 0;
    if (c.tensor.kind == StateKind::kPerRank) piece.shape = record.shape;
    record.pieces.push_back(std::move(piece));
    records.push_back(std::move(record));
  }
  lender.finish();
  writer.finish();
  return records;
}

// Phase 3's manifest: every rank's records, the entries' numbers and the user's values.
Manifest manifest_of(const SaveJob& job, const Group& group, const std::vector<std::string>& gathered) {
  Manifest manifest;
  manifest.library_version = COHORT_VERSION;
  manifest.step = job.step;
  manifest.world_size = group.size();
  manifest.created = utc_now();
  std::vector<std::vector<TensorRecord>> per_rank;
  for (int r = 0; r < group.size(); ++r) {
    per_rank.push_back(records_from_json(gathered[r].substr(2)));
    int64_t bytes = 0;
    for (const auto& record : per_rank.back()) {
      for (const auto& piece : record.pieces) bytes += piece.nbytes;
    }
    manifest.files.push_back({shard_file_name(r, group.size()), r, bytes});
  }
  manifest.tensors = merge_records(per_rank);
  manifest.values = job.values;
  for (const auto& [entry, numbers] : job.values) {
    if (numbers.count("zero_stage")) manifest.zero_stage = static_cast<int>(numbers.at("zero_stage"));
  }
  manifest.user = job.user;
  return manifest;
}

void remove_tmp(const fs::path& tmp) {
  std::error_code ignored;
  fs::remove_all(tmp, ignored);
}

}  // namespace

std::string status_of(const std::function<void()>& body) {
  try {
    body();
    return "";
  } catch (const Error& e) {
    return std::to_string(static_cast<int>(e.kind())) + without_rank_prefix(e.what());
  } catch (const fs::filesystem_error& e) {
    return std::to_string(static_cast<int>(ErrorKind::kIO)) + filesystem_text(e);
  } catch (const std::exception& e) {
    return std::to_string(static_cast<int>(ErrorKind::kIO)) + e.what();  // the filesystem library's
  }
}

void check_statuses(const std::vector<std::string>& statuses, int my_rank, const std::string& what) {
  std::string message;
  ErrorKind kind = ErrorKind::kIO;
  // With several ranks failing each is named, this one too (hostile pass 8: "rank 0: A; B" credited
  // rank 1's own B to rank 0).
  const auto failed = std::count_if(statuses.begin(), statuses.end(), [](const auto& s) { return !s.empty(); });
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].empty()) continue;
    if (message.empty()) kind = static_cast<ErrorKind>(statuses[r][0] - '0');
    if (!message.empty()) message += "; ";
    const std::string text = statuses[r].substr(1);
    message += static_cast<int>(r) == my_rank && failed == 1 ? text : "rank " + std::to_string(r) + ": " + text;
  }
  if (!message.empty()) throw Error(what + " failed: " + message, kind);
}

std::string writer_key(const Collected& c) {
  if (c.tensor.kind != StateKind::kSharded) return c.name;
  const int64_t begin = c.tensor.offset;
  return c.name + " elements [" + std::to_string(begin) + ", " + std::to_string(begin + c.tensor.tensor.numel()) + ")";
}

void write_and_commit(Group& group, const SaveJob& job) {
  // (1) Rank 0 makes a fresh temporary directory; leftovers of crashed saves are removed.
  check_statuses(group.allgather(group.rank() != 0 ? "" : status_of([&] { make_fresh_tmp(job.root, job.tmp); })),
                 group.rank(), job.what);

  // (2) Every rank writes its shard.
  std::vector<TensorRecord> records;
  std::string status = job.status;
  if (status.empty()) {
    status = status_of([&] {
      records = write_shard((job.tmp / shard_file_name(group.rank(), group.size())).string(), job.written_here,
                            group.rank(), group.size());
    });
  }
  maybe_die_for_test(group.rank(), job.step);
  const auto gathered = group.allgather(status.empty() ? "ok" + records_to_json(records) : "error" + status);
  std::vector<std::string> statuses;
  for (const std::string& g : gathered) statuses.push_back(g.rfind("ok", 0) == 0 ? "" : g.substr(5));
  if (group.rank() == 0 && !status_of([&] { check_statuses(statuses, 0, job.what); }).empty()) remove_tmp(job.tmp);
  check_statuses(statuses, group.rank(), job.what);

  // (3) Rank 0 writes the manifest and commits; the others wait for its word. A failure (a full disk)
  // removes the temporary directory, shards included: the previous checkpoint stays `latest`.
  const std::string committed = group.rank() != 0 ? "" : status_of([&] {
    write_file_safely((job.tmp / "manifest.json").string(), manifest_to_json(manifest_of(job, group, gathered)));
    commit(job.root, job.tmp, job.final_dir, job.keep_last);
  });
  if (!committed.empty()) remove_tmp(job.tmp);
  check_statuses(group.allgather(committed), group.rank(), job.what);
}

}  // namespace cohort::detail::ckpt
