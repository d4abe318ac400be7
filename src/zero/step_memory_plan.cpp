// The memory a ZeRO step holds beside the model states (step_memory_plan.h), from the engine's own
// limits: UnitCoordinator's prefetch, ReduceScheduler's reductions in flight, StateSwapper's buffers.
#include "zero/step_memory_plan.h"

#include <algorithm>

#include "core/check.h"

namespace cohort::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Each part is held below 2^60 bytes (an exbibyte per rank), so sums of them stay in an int64: the
// factors are in range one by one, but their products need not be (hostile pass 8, S4: a negative peak).
constexpr long double kMostBytes = 1152921504606846976.0L;

int64_t bytes_of(long double value, const char* what) {
  COHORT_CHECK_KIND(kInvalidArgument, value < kMostBytes, "step memory plan: ", what,
                    " come to more than 2^60 bytes (an exbibyte) per rank: no machine holds that; check the model's "
                    "shape and the counts given");
  return static_cast<int64_t>(value);
}

// Bytes per element of the compute-precision parameters and gradients.
int64_t element_bytes(PlanPrecision precision) { return precision == PlanPrecision::kFp32 ? 4 : 2; }

void check_input(const StepMemoryInput& in) {
  const int64_t psi = in.states.num_params;
  COHORT_CHECK_KIND(kInvalidArgument, in.unit_params >= 0 && in.unit_params <= psi, "step memory plan: a unit of ",
                    in.unit_params, " parameters in a model of ", psi);
  COHORT_CHECK_KIND(kInvalidArgument, in.units >= 1, "step memory plan: units must be >= 1, got ", in.units);
  COHORT_CHECK_KIND(kInvalidArgument, in.prefetch_bucket_size >= 0 && in.prefetch_units >= 0,
                    "step memory plan: stage3_prefetch_bucket_size and prefetch units must be >= 0, got ",
                    in.prefetch_bucket_size, " and ", in.prefetch_units);
  COHORT_CHECK_KIND(kInvalidArgument, in.reduce_bucket_size >= 1,
                    "step memory plan: reduce_bucket_size must be >= 1, got ", in.reduce_bucket_size);
  COHORT_CHECK_KIND(kInvalidArgument, in.optimizer_buffer_count >= 1 && in.param_buffer_count >= 1,
                    "step memory plan: buffer_count must be >= 1, got ", in.optimizer_buffer_count, " and ",
                    in.param_buffer_count);
  COHORT_CHECK_KIND(kInvalidArgument, in.activation_bytes >= 0 && in.process_bytes >= 0,
                    "step memory plan: activation and process bytes must be >= 0, got ", in.activation_bytes, " and ",
                    in.process_bytes);
}

// Stage 3: units gathered ahead of the running one. The coordinator gathers the next units in run
// order while their sizes fit the bucket (a unit that does not fit ends the walk) and the cap allows.
int64_t units_ahead(const StepMemoryInput& in, int64_t unit) {
  if (unit == 0 || in.units <= 1) return 0;
  int64_t ahead = std::min(in.units - 1, in.prefetch_bucket_size / unit);
  if (in.prefetch_units > 0) ahead = std::min(ahead, in.prefetch_units);
  return ahead;
}

// The optimizer's groups: stage 3's units, stage 1/2's gradient buckets.
int64_t group_elements(const StepMemoryInput& in, int64_t unit) {
  return in.states.stage == 3 ? unit : std::min(in.states.num_params, in.reduce_bucket_size);
}

// nvme: the group being stepped is lent whole (master, state and, on a CPU run at stage 2/3, the
// gradient shard); each swapper holds at most buffer_count more buffers (reads ahead, writes behind),
// a slot's size at most: so the step holds its group and buffer_count of the largest slot.
int64_t swap_bytes(const StepMemoryInput& in, const MemoryPlan& plan, int64_t unit) {
  const int64_t ranks = in.states.stage == 0 ? 1 : in.states.ranks;
  const long double e = element_bytes(in.states.precision);
  long double bytes = 0;
  if (plan.optimizer_tier == PlanTier::kNvme) {
    const int64_t shard = ceil_div(group_elements(in, unit), ranks);
    const auto per = bytes_per_param(in.states.precision, in.states.optimizer);
    // The master is a slot of its own (4 bytes an element; counted in K under mixed precision).
    const int64_t master = 4, states = per.optimizer_states - (in.states.precision == PlanPrecision::kFp32 ? 0 : 4);
    const int64_t grads = plan.grads_tier == PlanTier::kNvme ? 4 : 0;
    bytes += (long double)shard * (master + states + grads) +
             (long double)in.optimizer_buffer_count * shard * std::max(master, states);
  }
  if (plan.params_tier == PlanTier::kNvme) {
    const int64_t shard = ceil_div(unit, ranks);
    bytes += (1.0L + in.param_buffer_count) * shard * e;
  }
  return bytes_of(bytes, "the swap files' buffers");
}

}  // namespace

StepMemory plan_step_memory(const StepMemoryInput& in) {
  const MemoryPlan plan = plan_memory(in.states);  // checks the states' input first
  check_input(in);
  const int stage = in.states.stage;
  const int64_t e = element_bytes(in.states.precision);
  const int64_t unit = in.unit_params > 0 ? in.unit_params : in.states.num_params;
  const int64_t ranks = stage == 0 ? 1 : in.states.ranks;
  StepMemory out;
  if (stage == 3) out.gathered = bytes_of((1.0L + units_ahead(in, unit)) * unit * e, "the gathered units");
  // Whole gradients of the group being made, of the reduction just launched and of those in flight,
  // with the shard each reduction lands in.
  const int64_t group = stage == 3 ? unit : std::min(in.states.num_params, in.reduce_bucket_size);
  if (stage >= 2) {
    const int64_t staged = std::min<int64_t>(kMaxReductionsInFlight + 2,
                                             stage == 3 ? in.units : ceil_div(in.states.num_params, group));
    out.reducing = bytes_of(
        (long double)staged * group * e + (kMaxReductionsInFlight + 1.0L) * ceil_div(group, ranks) * e,
        "the gradients in flight");
  }
  out.swapping = swap_bytes(in, plan, unit);
  out.activations = bytes_of(in.activation_bytes, "the activations");
  out.process = bytes_of(in.process_bytes, "the process's bytes");
  return out;
}

int64_t planned_construction_bytes(const StepMemoryInput& in) {
  const StepMemory step = plan_step_memory(in);  // checks the input
  const int64_t e = element_bytes(in.states.precision), psi = in.states.num_params;
  const int64_t unit = in.unit_params > 0 ? in.unit_params : psi;
  const bool sharded = in.sharded_init && in.states.stage == 3;
  return step.process + bytes_of(sharded ? (long double)ceil_div(psi, in.states.ranks) * e + (long double)unit * e
                                         : (long double)psi * e,
                                 "the parameters as built");
}

int64_t planned_peak_bytes(const StepMemoryInput& in) {
  const MemoryPlan plan = plan_memory(in.states);
  return std::max(planned_construction_bytes(in), plan.device + plan.host + plan_step_memory(in).total());
}

}  // namespace cohort::detail
