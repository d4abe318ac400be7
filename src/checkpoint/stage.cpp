// stage_checkpoint (see stage.h): compare the manifest with what this state holds, then read.
#include "checkpoint/stage.h"

#include <algorithm>
#include <set>
#include <utility>

#include "checkpoint/tensor_reader.h"
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
      throw MismatchError(where + "it has no tensor '" + w.name + "' (saved from another model or optimizer?)");
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

}  // namespace

Staged stage_checkpoint(const std::string& path, const LoadRequest& request, int rank) {
  Staged staged;
  staged.path = path;
  staged.rank = rank;
  staged.manifest = read_manifest(path + "/manifest.json");
  const Manifest& m = staged.manifest;
  check_match(path, m, request, rank);
  TensorReader reader(path, m, rank);
  for (const Wanted& w : request.wanted) {
    const TensorRecord* r = m.find(w.name);
    if (r == nullptr) continue;  // optional and absent
    torch::Tensor value = reader.read(w.name, w.tensor, *r);
    if (w.tensor.part < 0) {
      staged.tensors[w.name] = std::move(value);
    } else {
      staged.deferred.insert(w.name);  // checked; its memory goes now, commit reads it again
    }
  }
  return staged;
}

}  // namespace cohort::detail::ckpt
