// stage_checkpoint (see stage.h): compare the manifest with what this state holds, then read.
#include "checkpoint/stage.h"

#include <algorithm>
#include <regex>
#include <set>
#include <utility>

#include "checkpoint/entry.h"
#include "checkpoint/position_values.h"
#include "checkpoint/tensor_reader.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

// Whether `rest` (a tensor's name after its entry) is the ZeRO engine's own flat-group form:
// "group0.master", or the Trainer's "tp0.group0.master" per tensor-parallel rank.
bool flat_group_name(const std::string& rest) {
  static const std::regex pattern("(tp[0-9]+\\.)?group[0-9]+\\..*");
  return std::regex_match(rest, pattern);
}

// Why a wanted tensor may be missing. The ZeRO engine's own state is by flat group
// ("engine/group0.master"); the Trainer saves it by parameter ("engine/fc.weight.master"), except with
// its optimizer state on NVMe, where it keeps the group form (per tensor-parallel rank under tensor
// parallelism: "engine/tp0.group0.master"). Names of the other forms say which.
std::string missing_tensor_hint(const Manifest& m, const std::string& name) {
  const size_t slash = name.find('/');
  const std::string entry = name.substr(0, slash + 1), rest = name.substr(slash + 1);
  const TensorRecord* by_group = nullptr;
  const TensorRecord* by_parameter = nullptr;
  for (const TensorRecord& r : m.tensors) {
    if (r.name.rfind(entry, 0) != 0 || r.name.size() < 7 || r.name.compare(r.name.size() - 7, 7, ".master") != 0)
      continue;
    (flat_group_name(r.name.substr(entry.size())) ? by_group : by_parameter) = &r;
  }
  const bool wanted_group = flat_group_name(rest);
  if (!wanted_group && by_group != nullptr)
    return ": its ZeRO engine's state was saved by flat group ('" + by_group->name +
           "': the optimizer state was on NVMe, or a cohort before checkpoint format 5 wrote it), this run's is by "
           "parameter: resume it with the offload_optimizer device it was saved with";
  if (wanted_group && by_parameter != nullptr)
    return ": its ZeRO engine's state was saved by parameter ('" + by_parameter->name +
           "'), this run keeps its optimizer state on NVMe, which loads the flat-group form only: resume it "
           "without offload_optimizer nvme";
  if (!wanted_group || by_group == nullptr) return " (saved from another model or optimizer?)";
  const bool wanted_tp = rest.rfind("tp", 0) == 0, saved_tp = by_group->name.substr(entry.size()).rfind("tp", 0) == 0;
  if (wanted_tp == saved_tp) return " (saved from another model or optimizer?)";
  return wanted_tp ? ": its ZeRO engine's state was saved whole ('" + by_group->name +
                         "'), without tensor parallelism; with the optimizer state on NVMe resume it at "
                         "tensor_parallel_size 1"
                   : ": its ZeRO engine's state was saved per tensor-parallel rank ('" + by_group->name +
                         "'); with the optimizer state on NVMe resume it at the tensor_parallel_size it was saved with";
}

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
      throw MismatchError(where + "it has no tensor '" + w.name + "'" + missing_tensor_hint(m, w.name));
    }
    const torch::Tensor& t = w.tensor.tensor;
    if (r->kind != w.tensor.kind) {
      // Owned against replicated: a pipeline's stages (each holds its own layers) against a whole model
      // on every rank; the layout, not the tensor, is what differs (hostile pass 14, m-3).
      const bool pipeline = (r->kind == StateKind::kOwned) != (w.tensor.kind == StateKind::kOwned) &&
                            (r->kind == StateKind::kReplicated || w.tensor.kind == StateKind::kReplicated);
      const std::string hint = !pipeline                      ? ""
                               : r->kind == StateKind::kOwned ? " (it was saved by a pipeline, whose stages own "
                                                                "their layers; this run holds the whole model: resume "
                                                                "it as a pipeline, or start another directory)"
                                                              : " (it was saved with the whole model on every rank; "
                                                                "this run is a pipeline: resume it as it was saved, "
                                                                "or start another directory)";
      throw MismatchError(where + "tensor '" + w.name + "' is " + kind_name(r->kind) + " in the checkpoint, " +
                          kind_name(w.tensor.kind) + " here" + hint);
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
      // The engine's groups follow the model and reduce_bucket_size (stage 3: its sharding units): a
      // bucket size changed since the save read as another model (hostile pass 11, m-f).
      const bool engine = w.name.rfind("engine/", 0) == 0;
      throw MismatchError(where + "tensor '" + w.name + "' has shape " + shape_text(saved) + " in the checkpoint, " +
                          shape_text(mine) + " here" +
                          (engine ? ": the ZeRO engine's parameter groups differ; they follow the model and "
                                    "reduce_bucket_size (stage 3: the sharding units), keep those of the saved run"
                                  : ""));
    }
  }
  for (const TensorRecord& r : m.tensors) {
    const std::string entry = r.name.substr(0, r.name.find('/'));
    const bool anothers = (r.kind == StateKind::kOwned || r.kind == StateKind::kSharded) &&
                          request.listed_anywhere.count(r.name);
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
  try {  // before the match: a deleted sampler entry is damage to fall back from, not another program
    check_trainer_sampler(m);
    check_trainer_rng(m);
  } catch (const Error& e) {
    throw Error(path + "/manifest.json: " + without_rank_prefix(e.what()), ErrorKind::kIO);
  }
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
