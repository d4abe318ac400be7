// Where the ZeRO engine's state lives: the flat groups (partition.h) and, for each, the parameters in
// compute precision, the fp32 master the optimizer steps on, the gradients kept between backward and
// step, and which tier (StatePlacement) holds each kind. The stage decides the shapes:
//   stage 0: flat [padded] (the parameters alias it), master [padded], flat_grad [padded] (.grad aliases it)
//   stage 1: flat and flat_grad as stage 0, master [shard], shard_grad the reduced shard until the step
//   stage 2: flat [padded], master [shard], shard_grad [shard] accumulated over micro-steps
//   stage 3: the parameter shards [shard] in ParameterShards (the parameters are empty between uses;
//            offload_param moves the shards), master and shard_grad [shard]
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
#include "zero/offload/host_staging.h"
#include "zero/offload/optimizer_file.h"
#include "zero/offload/parameter_shards.h"
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
  /// The parameters' dtype and device (what gradients and reduction buffers use).
  torch::TensorOptions parameter_options() const { return params_.at(0).options().requires_grad(false); }

  /// Stage 0-2: the compute-precision parameters [padded] (stage 3: shards()).
  const torch::Tensor& parameters(int64_t g) const { return groups_[size_t(g)].flat; }
  /// Stage 3: this rank's parameter shards, where offload_param keeps them (what a gather starts from).
  ParameterShards& shards() { return shards_; }
  /// Sets the compute-precision parameters this rank updates (all at stage 0, its shard at 1-3) to
  /// `master`'s values.
  void write_parameters(int64_t g, const torch::Tensor& master);
  /// Stage 0-2: the part of parameters(g) this rank updates (all at stage 0, its shard at 1 and 2).
  torch::Tensor owned_parameters(int64_t g) const;
  /// The fp32 master the optimizer steps on: [shard], or [padded] at stage 0.
  const torch::Tensor& master(int64_t g) const { return groups_[size_t(g)].master; }
  /// Whether the master is a copy (mixed precision, offload) rather than the owned parameters.
  bool master_is_copy(int64_t g) const;

  /// offload_optimizer nvme: masters, their optimizer state and (stage 2/3 on the CPU) gradient
  /// shards on file, lent a group at a time; between lends those tensors are empty. Without nvme
  /// its calls do nothing.
  OptimizerFile& optimizer_file() { return optimizer_file_; }
  bool masters_on_file() const { return optimizer_file_.active(); }

  /// offload_optimizer cpu on a CUDA device (stage 1-3): each reduced gradient shard goes down to an
  /// fp32 host tensor (shard_grad) as its reduction finishes, and the updated masters go up after
  /// the host step, both through HostStaging's bounded page-locked buffers on a side stream.
  bool gradients_on_host() const { return staging_ != nullptr; }
  /// Queues group g's reduced shard `reduced` (on the device) into its host gradient, added to what
  /// is there when `accumulate`.
  void receive_gradient(int64_t g, const torch::Tensor& reduced, bool accumulate);
  /// The end of backward: every received gradient has landed in host memory.
  void gradients_received();
  /// The end of a step's write-back: the compute stream waits for the parameters going up.
  void parameters_written();

  GroupGradients& gradients(int64_t g) { return groups_[size_t(g)].grads; }
  /// Stage 0/1: the slice of flat_grad that is parameter `param`'s .grad.
  const torch::Tensor& gradient_alias(int64_t param) const { return grad_aliases_[size_t(param)]; }
  /// The group's reduced gradient, which the optimizer step reads (on file: lend it first).
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
    torch::Tensor flat;        // compute dtype: [padded] (stage 0-2, parameters alias it); stage 3: shards_
    torch::Tensor master;      // fp32 optimizer parameter: [shard], or [padded] at stage 0
    bool master_copy = false;  // the master is not the owned parameters themselves
    GroupGradients grads;
  };
  torch::Device device_of(Tier tier) const;

  const EngineSettings& settings_;
  TrainableParameters& params_;
  std::vector<Group> groups_;
  std::vector<int64_t> group_of_;            // parameter -> group
  std::vector<torch::Tensor> grad_aliases_;  // stage 0/1: each parameter's slice of flat_grad
  ParameterShards shards_;                   // stage 3
  BufferPool buffers_;                       // buffer_pool.h says why not malloc
  OptimizerFile optimizer_file_;             // offload_optimizer nvme
  std::unique_ptr<HostStaging> staging_;     // offload_optimizer cpu on CUDA
};

}  // namespace cohort::detail
