// Trainer::planned_memory (see strategy.h): what cohort-plan predicts for a Trainer's model, from the
// ZeRO paper's formulas in src/zero/memory_plan.h, so that a run can print the planner's figures
// beside the engine's measured ones.
#include <torch/optim/sgd.h>

#include "trainer/strategy.h"
#include "zero/memory_plan.h"

namespace cohort::detail {
namespace {

PlanPrecision plan_precision(c10::ScalarType dtype) {
  if (dtype == torch::kBFloat16) return PlanPrecision::kBf16;
  if (dtype == torch::kHalf) return PlanPrecision::kFp16;
  return PlanPrecision::kFp32;
}

// The optimizer by the states it keeps per parameter: Adam and AdamW two, SGD one with momentum.
PlanOptimizer plan_optimizer(torch::optim::Optimizer& optimizer) {
  const std::string name = optimizer_name(optimizer);
  if (name == "AdamW") return PlanOptimizer::kAdamW;
  if (name != "SGD") return PlanOptimizer::kAdam;
  for (const auto& group : optimizer.param_groups())
    if (static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() != 0)
      return PlanOptimizer::kSgdMomentum;
  return PlanOptimizer::kSgd;
}

PlanTier plan_tier(OffloadDevice device) {
  return device == OffloadDevice::kNvme  ? PlanTier::kNvme
         : device == OffloadDevice::kCpu ? PlanTier::kHost
                                         : PlanTier::kDevice;
}

}  // namespace

MemoryReport planned_memory(Strategy& strategy, const World& world) {
  // The engine shards over the data-parallel ranks (all of them unless tensor parallel or a pipeline
  // splits the world; one replica's under HSDP), its num_parameters this rank's part's.
  const int shard_ranks = strategy.shard_ranks(world);
  MemoryPlanInput input;
  input.num_params = std::max<int64_t>(strategy.memory_report().num_parameters, 1);
  input.ranks = strategy.zero_stage() == 0 ? 1 : shard_ranks;
  input.stage = strategy.zero_stage();
  input.precision = plan_precision(strategy.compute_dtype());
  input.optimizer = plan_optimizer(strategy.optimizer());
  input.offload_optimizer = plan_tier(strategy.offload_optimizer());
  input.offload_params = plan_tier(strategy.offload_params());
  input.cpu_run = !world.device().is_cuda();
  const MemoryPlan plan = plan_memory(input);
  MemoryReport report;
  report.num_parameters = input.num_params;
  // As a run's memory_report() counts them: what is in swap files is in file_bytes alone.
  auto in_memory = [](PlanTier tier, int64_t bytes) { return tier == PlanTier::kNvme ? 0 : bytes; };
  report.parameter_bytes = in_memory(plan.params_tier, plan.params);
  report.gradient_bytes = in_memory(plan.grads_tier, plan.grads);
  report.optimizer_bytes = in_memory(plan.optimizer_tier, plan.optimizer_states);
  report.file_bytes = plan.nvme;
  return report;
}

}  // namespace cohort::detail
