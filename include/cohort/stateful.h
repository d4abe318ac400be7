// cohort::Stateful: the contract between things that hold resumable training state (the ZeRO engine,
// a loss scaler, anything a user writes) and the checkpoint layer (cohort/checkpoint.h). A Stateful
// lists its tensors as this rank holds them (whole and identical on every rank, a slice of a flat
// tensor split across ranks, or this rank's own) plus a few named numbers; the checkpoint layer
// saves them and, at load time, fills the same list again, at the same or another world size. State
// kept out of memory (a ZeRO engine's optimizer state on NVMe) is listed in parts, each lent to the
// checkpoint layer while it is read or filled, so a save or a load never holds all of it at once.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

enum class StateKind {
  /// The same whole tensor on every rank (a DDP model's parameters). Loaded whole on every rank.
  kReplicated,
  /// `tensor` is 1-D and holds elements [offset, offset + tensor.numel()) of a logical flat tensor of
  /// `flat_numel` elements that the ranks split between them (a ZeRO shard). At load time each rank
  /// asks for its own range again, which may cut the saved ranks' slices differently.
  kSharded,
  /// This rank's own value (an RNG state). Loaded by the rank of the same number; a rank that did
  /// not exist when saving takes rank 0's.
  kPerRank,
  /// A whole tensor that only some ranks hold, the same on each of them (a pipeline stage's
  /// parameters, named as in the whole model). Written once, by one of the ranks that list it;
  /// loaded by every rank that lists it, whichever rank saved it, so the holders may change between
  /// save and load (another pipeline partition). A saved one that no loading rank lists is a mismatch.
  kOwned,
};

/// One tensor of state as this rank holds it. `tensor` is live storage: saving reads it, loading
/// copies into it (the dtype and shape must match what was saved, or loading fails naming it).
struct StateTensor {
  std::string name;  ///< unique within its Stateful, e.g. "flat0.exp_avg"
  torch::Tensor tensor;
  StateKind kind = StateKind::kReplicated;
  int64_t flat_numel = 0;  ///< kSharded only: elements of the whole logical flat tensor
  int64_t offset = 0;      ///< kSharded only: where this rank's slice begins in it
  /// kSharded only, optional: the shape of the whole tensor (its size flat_numel) for the manifest,
  /// so that cohort-ckpt consolidate writes it in that shape; empty: [flat_numel].
  std::vector<int64_t> whole_shape = {};
  /// -1: `tensor` is live storage. From 0: the tensor belongs to that part of its Stateful's state,
  /// which is out of memory between uses: `tensor` is then on the meta device (its dtype and shape
  /// only), and Stateful::lend_part gives the live one.
  int64_t part = -1;
};

/// Named numbers (step counters, loss scale, positions): exact for integers below 2^53.
using StateValues = std::map<std::string, double>;

class Stateful {
 public:
  virtual ~Stateful() = default;
  /// Called before loading, on every rank: create state that is made lazily (optimizer moments
  /// before the first step) so that state_tensors() lists everything a checkpoint may hold.
  virtual void prepare_load() {}
  /// The tensors to save, or to load into.
  virtual std::vector<StateTensor> state_tensors() = 0;
  /// Brings `part` into memory and returns its tensors: those state_tensors() listed with this part,
  /// by the same names, as live storage until give_back_part(part). The checkpoint layer lends one
  /// part at a time, in the order state_tensors() lists them, and gives it back before the next.
  virtual std::vector<StateTensor> lend_part(int64_t part) { return {}; }
  /// Ends lend_part(part); `changed`: a load copied into its tensors, keep what they hold now.
  virtual void give_back_part(int64_t part, bool changed) {}
  /// The numbers to save (same on every rank: rank 0's are written).
  virtual StateValues state_values() const { return {}; }
  /// Called while loading, on every rank, before anything live changes, with the saved numbers and the
  /// size of the world that saved them: throw cohort::Error naming the key and the value for a number
  /// this Stateful cannot take (a negative position, a count past its data). The checkpoint is then
  /// unusable, as a damaged one is: loading falls back to an older one, the message prefixed with the
  /// manifest's path.
  virtual void check_state_values(const StateValues& values, int saved_world_size) const {}
  /// Called after every tensor was loaded, with the saved numbers.
  virtual void load_state_values(const StateValues& values) {}
  /// Whether a checkpoint may lack some of the tensors listed (state made lazily, as optimizer
  /// moments: prepare_load() creates it, and a checkpoint saved before it existed has none).
  virtual bool tensors_optional() const { return false; }
};

}  // namespace cohort
COHORT_EXPORT_END
