// Where the ZeRO engine's state lives: the flat groups (partition.h) and, for each, the parameters in
// compute precision, the fp32 master the optimizer steps on, the gradients kept between backward and
// step, and which tier (StatePlacement) holds each kind. The stage decides the shapes:
//   stage 0: flat [padded] (the parameters alias it), master [padded], flat_grad [padded] (.grad aliases it)
//   stage 1: flat and flat_grad as stage 0, master [shard], shard_grad the reduced shard until the step
//   stage 2: flat [padded], master [shard], shard_grad [shard] accumulated over micro-steps
//   stage 3: flat [shard] (the parameters are empty between uses), master and shard_grad [shard]
// The unit coordinator, the reduce scheduler and the optimizer step reach state only through this
// class, so keeping masters, optimizer state or parameter shards on the host or in files changes the
// store and its placement alone (docs/design/zero-engine.md, "Where offload plugs in"). The store also
// lends the engine's transient blocks (gathered units, staged gradients) from its pool.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cohort/zero.h"
#include "zero/buffer_pool.h"
#include "zero/engine_settings.h"
#include "zero/offload/state_swapper.h"
#include "zero/partition.h"
#include "zero/trainable_parameters.h"

namespace cohort::detail {

/// Bytes of `t`'s elements (0 when undefined): what the memory report counts.
inline int64_t tensor_bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * int64_t(t.element_size()) : 0; }

/// A group's gradients in compute precision: the reduce scheduler fills them, the step consumes them.
struct GroupGradients {
  torch::Tensor flat_grad;       ///< stage 0/1: [padded], the parameters' .grad alias it
  torch::Tensor shard_grad;      ///< stage 2/3: [shard], accumulated over micro-steps; stage 1: the reduced
                                 ///< shard, from the boundary backward to its step
  bool shard_grad_clean = true;  ///< stage 2/3: shard_grad is zero (no reduction since the last step)
};

class StateStore {
 public:
  StateStore(const EngineSettings& settings, TrainableParameters& params);

  /// Adds the next group. At stage 3 `shard` is this rank's shard of its parameters, which are
  /// emptied before this returns (so the whole model never exists twice); at stage 0-2 `shard` is
  /// unused and the parameters come to live in the group's flat tensor.
  void add_group(GroupLayout layout, const torch::Tensor& shard);

  int64_t size() const { return int64_t(groups_.size()); }
  const GroupLayout& layout(int64_t g) const { return groups_[size_t(g)].layout; }
  int64_t group_of(int64_t param) const { return group_of_[size_t(param)]; }
  const StatePlacement& placement() const { return settings_.placement; }

  /// The compute-precision parameters: [padded] at stage 0-2, this rank's [shard] at stage 3 (what a
  /// unit's gather starts from).
  const torch::Tensor& parameters(int64_t g) const { return groups_[size_t(g)].flat; }
  /// The part of parameters(g) this rank updates: all of it at stage 0 and 3, its shard at 1 and 2.
  torch::Tensor owned_parameters(int64_t g) const;
  /// The fp32 master the optimizer steps on: [shard], or [padded] at stage 0.
  const torch::Tensor& master(int64_t g) const { return groups_[size_t(g)].master; }
  /// Whether the master is a copy (mixed precision, offload) rather than the owned parameters.
  bool master_is_copy(int64_t g) const;

  /// Masters on file (offload_optimizer nvme): between lends master(g) and the optimizer state put
  /// on file with it are empty tensors; a lend points them at their values in host memory.
  bool masters_on_file() const { return swapper_ != nullptr; }
  /// Starts reading group g's master and state ahead of its lend (nothing when not on file).
  void prefetch_master(int64_t g);
  void lend_master(int64_t g);
  /// Ends a lend; `changed` writes the values back.
  void give_back_master(int64_t g, bool changed);
  /// Puts group g's optimizer state (tensors made while its master is lent) on file beside it.
  void add_master_state(int64_t g, std::vector<torch::Tensor> state);
  bool has_master_state(int64_t g) const { return groups_[size_t(g)].state_slot >= 0; }
  bool master_lent(int64_t g) const;
  /// Waits for every write of a given-back master; a failure is an Error of kind I/O.
  void flush_masters();
  /// Lends every master and its state until release_held_masters (a checkpoint reads or fills them
  /// in place: cohort::Stateful's tensors are live storage). Nothing when not on file.
  void hold_all_masters();
  /// Gives back what hold_all_masters lent, written when `changed` or when a step changed them.
  void release_held_masters(bool changed);
  /// A held master changed (a step ran while a checkpoint held them).
  void mark_held_changed() { held_changed_ = held_; }

  GroupGradients& gradients(int64_t g) { return groups_[size_t(g)].grads; }
  /// Stage 0/1: the slice of flat_grad that is parameter `param`'s .grad.
  const torch::Tensor& gradient_alias(int64_t param) const { return grad_aliases_[size_t(param)]; }
  /// The group's reduced gradient, which the optimizer step reads.
  const torch::Tensor& reduced_gradient(int64_t g) const;
  /// After a step, a skipped step or a load: no master has a .grad, the kept gradients are zero.
  void zero_gradients();
  /// Zeroes each master's padding (a checkpoint of another world size may have left values there).
  void zero_master_padding();

  BufferPool& buffers() { return buffers_; }
  /// Adds the parameters, the kept gradients, the master copies and the pool's idle blocks.
  void add_memory(MemoryReport& report) const;

 private:
  struct Group {
    GroupLayout layout;
    torch::Tensor flat;    // compute dtype: [padded] (stage 0-2, parameters alias it), [shard] (stage 3)
    torch::Tensor master;  // fp32 optimizer parameter: [shard], or [padded] at stage 0
    GroupGradients grads;
    StateSwapper::Slot master_slot = -1;  // masters on file: the master's slot, its state's
    StateSwapper::Slot state_slot = -1;
  };
  torch::Device device_of(Tier tier) const;
  SwapperOptions optimizer_swapper_options() const;

  const EngineSettings& settings_;
  TrainableParameters& params_;
  std::vector<Group> groups_;
  std::vector<int64_t> group_of_;            // parameter -> group
  std::vector<torch::Tensor> grad_aliases_;  // stage 0/1: each parameter's slice of flat_grad
  BufferPool buffers_;                       // buffer_pool.h says why not malloc
  std::unique_ptr<StateSwapper> swapper_;    // masters on file
  bool held_ = false;                        // hold_all_masters lent them all
  bool held_changed_ = false;
};

}  // namespace cohort::detail
