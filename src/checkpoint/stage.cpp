// stage_checkpoint (see stage.h): compare the manifest with what this state holds, then read.
#include "checkpoint/stage.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include "checkpoint/layout.h"
#include "checkpoint/shard_file.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

// The checkpoint's mode (DDP or a ZeRO stage), names and kinds agree with the state's, else a
// MismatchError naming the first difference. The mode comes first: under another mode every tensor
// differs, and "tensor 'engine/group0.master' is sharded" would not say why.
void check_match(const std::string& path, const Manifest& m, const LoadRequest& request, int rank) {
  const std::optional<int> saved_stage = zero_stage_of(m.values);
  if (saved_stage != request.zero_stage) {
    throw MismatchError("checkpoint " + path + " was saved by " + mode_name(saved_stage) + ", this run uses " +
                        mode_name(request.zero_stage) + ": the mode differs; resume with " + mode_name(saved_stage) +
                        " or start a new checkpoint directory");
  }
  const std::vector<Wanted>& wanted = request.wanted;
  const std::vector<std::string>& entries = request.entries;
  const std::string where = "checkpoint " + path + " does not match this state: ";
  std::set<std::string> registered(entries.begin(), entries.end()), asked;
  for (const std::string& entry : entries) {
    if (entry == "rng") continue;  // may be saved without RNG states
    if (!m.values.count(entry)) throw MismatchError(where + "it has no '" + entry + "'");
  }
  for (const auto& [entry, numbers] : m.values) {
    if (entry != "rng" && !registered.count(entry)) {
      throw MismatchError(where + "it holds '" + entry + "', which this state does not add");
    }
  }
  for (const Wanted& w : wanted) {
    asked.insert(w.name);
    const TensorRecord* r = m.find(w.name);
    if (r == nullptr) {
      if (w.optional) continue;
      throw MismatchError(where + "it has no tensor '" + w.name + "' (saved from another model?)");
    }
    const torch::Tensor& t = w.tensor.tensor;
    if (r->kind != w.tensor.kind) {
      throw MismatchError(where + "tensor '" + w.name + "' is " + kind_name(r->kind) + " in the checkpoint, " +
                          kind_name(w.tensor.kind) + " here");
    }
    if (r->dtype != t.scalar_type()) {
      throw MismatchError(where + "tensor '" + w.name + "' is " + dtype_name(r->dtype) + " in the checkpoint, " +
                          c10::toString(t.scalar_type()) + " here");
    }
    std::vector<int64_t> saved = r->shape, mine = t.sizes().vec();
    if (r->kind == StateKind::kSharded) {
      saved = {r->flat_numel};
      mine = {w.tensor.flat_numel};
    } else if (r->kind == StateKind::kPerRank) {
      const auto own = std::find_if(r->pieces.begin(), r->pieces.end(), [&](const Piece& p) { return p.rank == rank; });
      saved = own != r->pieces.end() ? own->shape : r->pieces.at(0).shape;
    }
    if (saved != mine) {
      throw MismatchError(where + "tensor '" + w.name + "' has shape " + shape_text(saved) + " in the checkpoint, " +
                          shape_text(mine) + " here");
    }
  }
  for (const TensorRecord& r : m.tensors) {
    const std::string entry = r.name.substr(0, r.name.find('/'));
    const bool anothers = r.kind == StateKind::kOwned && request.owned_anywhere.count(r.name);
    if (registered.count(entry) && !asked.count(r.name) && !anothers) {
      throw MismatchError(where + "it has tensor '" + r.name + "', which this state does not have");
    }
  }
}

class Reader {
 public:
  Reader(std::string dir, const Manifest& m) : dir_(std::move(dir)), m_(m) {}
  ShardReader& file(const std::string& name) {
    auto it = open_.find(name);
    if (it != open_.end()) return *it->second;
    const auto record = std::find_if(m_.files.begin(), m_.files.end(),
                                     [&](const FileRecord& f) { return f.name == name; });
    COHORT_CHECK_KIND(kIO, record != m_.files.end(), dir_, "/manifest.json names file ", name,
                      " but does not list it in 'files'");
    auto reader = std::make_unique<ShardReader>(dir_ + "/" + name, record->rank, m_.world_size, record->payload_bytes);
    return *open_.emplace(name, std::move(reader)).first->second;
  }
  // The whole piece, checksum checked.
  torch::Tensor piece(const Piece& p, c10::ScalarType dtype, const std::string& name) {
    const int64_t element = c10::elementSize(dtype);
    COHORT_CHECK_KIND(kIO, p.nbytes == p.numel * element, dir_, "/manifest.json: tensor '", name, "' has ", p.numel,
                      " elements in ", p.nbytes, " bytes");
    torch::Tensor out = torch::empty({p.numel}, torch::TensorOptions().dtype(dtype));
    file(p.file).read_piece(p, out.data_ptr(), "tensor '" + name + "'");
    return out;
  }

 private:
  std::string dir_;
  const Manifest& m_;
  std::map<std::string, std::unique_ptr<ShardReader>> open_;
};

}  // namespace

Staged stage_checkpoint(const std::string& path, const LoadRequest& request, int rank) {
  Staged staged;
  staged.manifest = read_manifest(path + "/manifest.json");
  const Manifest& m = staged.manifest;
  check_match(path, m, request, rank);
  Reader reader(path, m);
  for (const Wanted& w : request.wanted) {
    const TensorRecord* r = m.find(w.name);
    if (r == nullptr) continue;  // optional and absent
    const torch::Tensor& live = w.tensor.tensor;
    if (r->kind == StateKind::kSharded) {
      std::vector<Slice> slices;
      for (const Piece& p : r->pieces) slices.push_back({p.offset, p.numel});
      const int64_t begin = w.tensor.offset, end = begin + live.numel();
      torch::Tensor out = torch::empty({live.numel()}, torch::TensorOptions().dtype(r->dtype));
      const int64_t element = c10::elementSize(r->dtype);
      for (const SliceCopy& c : plan_slice_copies(slices, begin, end, path + ": tensor '" + w.name + "'")) {
        const torch::Tensor piece = reader.piece(r->pieces[c.slice], r->dtype, w.name);
        std::memcpy(static_cast<char*>(out.data_ptr()) + c.to * element,
                    static_cast<const char*>(piece.data_ptr()) + c.from * element, c.count * element);
      }
      staged.tensors[w.name] = out.view(live.sizes());
      continue;
    }
    const Piece* piece = &r->pieces.at(0);
    if (r->kind == StateKind::kPerRank) {
      for (const Piece& p : r->pieces) {
        if (p.rank == rank) piece = &p;  // a rank that did not exist when saving takes rank 0's
      }
    }
    staged.tensors[w.name] = reader.piece(*piece, r->dtype, w.name).view(live.sizes());
  }
  return staged;
}

}  // namespace cohort::detail::ckpt
