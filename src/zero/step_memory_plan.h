// The memory a rank holds while a ZeRO step runs, beside its model states (memory_plan.h): the
// engine's working buffers (stage 3's gathered units, the gradients staged for the reductions in
// flight), the swappers' buffers of offload to NVMe, what autograd keeps for backward, and the process
// itself. A pure function of the engine's settings, so cohort-plan and the tests share the engine's
// own limits; the activations and the process are given by the caller (they depend on the model and
// on the build, not on ZeRO).
#pragma once

#include <cstdint>

#include "zero/memory_plan.h"

namespace cohort::detail {

/// Stage 2/3: a rank ahead of its peers waits for its oldest reduction once more than this many are
/// in flight (ReduceScheduler::retire), so backward stages at most this many groups' gradients plus
/// the group whose gradients are being made and the one whose reduction it just launched.
constexpr int64_t kMaxReductionsInFlight = 2;

/// DeepSpeed's defaults, which cohort's ZeroConfig takes too.
constexpr int64_t kDefaultPrefetchBucketSize = 50'000'000;  // stage3_prefetch_bucket_size
constexpr int64_t kDefaultReduceBucketSize = 500'000'000;   // reduce_bucket_size
constexpr int64_t kDefaultOptimizerBufferCount = 4;         // offload_optimizer.buffer_count
constexpr int64_t kDefaultParamBufferCount = 5;             // offload_param.buffer_count

struct StepMemoryInput {
  MemoryPlanInput states;   ///< the model states' plan: parameters, ranks, stage, precision, offload
  int64_t unit_params = 0;  ///< stage 3: the largest sharding unit's parameters (0: the model is one unit)
  int64_t units = 1;        ///< stage 3: how many sharding units hold parameters
  int64_t prefetch_bucket_size = kDefaultPrefetchBucketSize;  ///< elements gathered ahead of the running unit
  int64_t prefetch_units = 0;  ///< a cap on the units gathered ahead (FSDP2's 1); 0: the bucket decides
  int64_t reduce_bucket_size = kDefaultReduceBucketSize;  ///< stage 1/2: elements per gradient group
  int64_t optimizer_buffer_count = kDefaultOptimizerBufferCount;
  int64_t param_buffer_count = kDefaultParamBufferCount;
  int64_t activation_bytes = 0;  ///< what autograd keeps for backward at the peak (the model's; 0: not counted)
  int64_t process_bytes = 0;     ///< the process before the model: LibTorch and cohort loaded (0: not counted)
  bool sharded_init = false;     ///< stage 3: each unit sharded as it is made (ShardedInit), not the whole model first
};

struct StepMemory {
  int64_t gathered = 0;  ///< stage 3: the running unit and the units gathered ahead, whole
  int64_t reducing = 0;  ///< stage 2/3: whole gradients staged for the reductions in flight, and their shards
  int64_t swapping = 0;  ///< nvme: the groups and shards lent, read ahead and written behind
  int64_t activations = 0;
  int64_t process = 0;
  int64_t working() const { return gathered + reducing + swapping; }
  int64_t total() const { return working() + activations + process; }
};

/// Throws cohort::Error for a unit larger than the model, a count or size below its range, or an
/// input plan_memory refuses.
StepMemory plan_step_memory(const StepMemoryInput& input);

/// Before the engine takes the model: the process and the parameters as built, whole, or with
/// sharded_init this rank's shards and the unit being made (the engine moves the shards to their tier
/// afterwards, so offload does not lower this).
int64_t planned_construction_bytes(const StepMemoryInput& input);

/// On a CPU run, the peak a rank's resident size reaches: the larger of the construction and of the
/// model states held in memory (the device's and the host's; not what lives on NVMe) with the step's.
int64_t planned_peak_bytes(const StepMemoryInput& input);

}  // namespace cohort::detail
