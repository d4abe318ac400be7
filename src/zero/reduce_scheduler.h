// The reductions of backward: which gradients autograd has produced, each group's reduction (an
// allreduce at stage 0, a reduce-scatter at 1-3; under HSDP then an allreduce of the result across
// the replicas, EngineOptions::replicate_comm) launched as soon as its gradients are complete and
// its turn has come (the note "launch order" in engine_impl.h), and the launched ones retired in
// launch order within reduce_bucket_size staged elements and kMaxReductionsInFlight reductions. It
// fills the store's gradients (state_store.h); what a unit's parameters do when its backward ends is
// the unit coordinator's, and ZeroEngineImpl calls each in turn.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "cohort/comm.h"
#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace cohort::detail {

class ReduceScheduler {
 public:
  ReduceScheduler(const EngineSettings& settings, TrainableParameters& params, StateStore& store);

  /// A backward that reduces begins: stage 2/3 every backward, stage 0/1 the boundary's.
  void begin_backward();
  /// That backward is over (also when it threw): gradients arriving later are not reduced.
  void end_backward() { in_backward_ = false; }
  bool in_backward() const { return in_backward_; }
  /// Autograd wrote parameter `param`'s gradient (a gradient hook). Returns its group when that was
  /// the group's last gradient of this backward, else -1 (also outside a backward that reduces).
  int64_t gradient_ready(int64_t param);
  /// Launches the groups whose turn has come, in order, and retires those finished or over budget.
  void launch_ready();
  /// The end of backward: parameters without a gradient count as zero; launches what is left and
  /// waits for every reduction.
  void finish();
  /// Whether group `g`'s reduction was launched in the backward running now (its backward is over).
  bool launched_in_backward(int64_t g) const { return in_backward_ && reductions_[size_t(g)].launched; }
  /// Adds the staged gradients and, at stage 2/3, the gradients autograd produced not reduced yet.
  void add_memory(MemoryReport& report) const;

 private:
  struct Reduction {
    int pending = 0;  // gradients of the group still to come in this backward
    bool launched = false;
    torch::Tensor reduce_input, reduce_output;
    Work reduce_work;
    // stage 0/1 with a communication_data_type other than the compute dtype: the cast gradients in
    // flight and (stage 1) the reduced shard in that dtype, cast back when the reduction retires
    torch::Tensor comm_input, comm_shard;
    bool accumulate = false;  // stage 2/3: an earlier micro-step's reduction is in the shard already
    // HSDP: the shard group's result, allreduced across the replicas once that reduction finished
    torch::Tensor replicate_target;
    Work replicate_work;
    bool replicating = false;
  };
  void launch(int64_t g);
  void launch_flat(int64_t g);    // stage 0/1: the gradients are flat already
  void launch_cast(int64_t g);    // stage 0/1 in communication_data_type
  void launch_staged(int64_t g);  // stage 2/3: the gradients staged into a pooled buffer first
  void retire(bool all);
  /// HSDP: `result` (what the shard group's reduction leaves) is allreduced across the replicas next.
  void across_replicas(Reduction& reduction, const torch::Tensor& result) const;
  /// HSDP: launches the replica allreduce of the oldest reduction once its shard reduction is done;
  /// whether it is finished (waited for when `wait`).
  bool replicated(Reduction& reduction, bool wait);
  void land_on_host(int64_t g);

  const EngineSettings& settings_;
  TrainableParameters& params_;
  StateStore& store_;
  std::vector<Reduction> reductions_;  // per group
  std::vector<char> ready_;            // per parameter: its gradient came in this backward
  int64_t next_launch_ = 0;            // groups launched this backward, counted from the last
  int64_t next_retire_ = 0;            // of those, how many have finished (their staging buffers freed)
  int64_t in_flight_elements_ = 0;     // staged gradient elements of launched, unfinished reductions
  bool in_backward_ = false;
};

}  // namespace cohort::detail
