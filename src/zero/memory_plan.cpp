// ZeRO memory model (see memory_plan.h): bytes per parameter by precision and optimizer, and bytes
// per rank by stage. Integer arithmetic throughout, so the paper's example comes out to the byte.
#include "zero/memory_plan.h"

#include <limits>
#include <vector>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {

BytesPerParam bytes_per_param(PlanPrecision precision, PlanOptimizer optimizer) {
  const bool mixed = precision != PlanPrecision::kFp32;
  int64_t states = 0;  // fp32 optimizer state buffers
  switch (optimizer) {
    case PlanOptimizer::kAdam:
    case PlanOptimizer::kAdamW: states = 2; break;
    case PlanOptimizer::kSgdMomentum: states = 1; break;
    case PlanOptimizer::kSgd: states = 0; break;
  }
  BytesPerParam out;
  out.params = mixed ? 2 : 4;
  out.grads = mixed ? 2 : 4;
  out.optimizer_states = (mixed ? 4 : 0) + 4 * states;  // mixed precision adds the fp32 master copy
  return out;
}

MemoryPlan plan_memory(const MemoryPlanInput& input) {
  COHORT_CHECK_KIND(kInvalidArgument, input.num_params >= 1, "memory plan: num_params=", input.num_params,
                    " must be at least 1");
  COHORT_CHECK_KIND(kInvalidArgument, input.num_params <= std::numeric_limits<int64_t>::max() / 16,
                    "memory plan: num_params=", input.num_params, " is too large to count in bytes");
  COHORT_CHECK_KIND(kInvalidArgument, input.ranks >= 1, "memory plan: ranks=", input.ranks, " must be at least 1");
  COHORT_CHECK_KIND(kInvalidArgument, input.stage >= 0 && input.stage <= 3, "memory plan: stage=", input.stage,
                    " is not one of 0, 1, 2, 3");
  COHORT_CHECK_KIND(kInvalidArgument, input.offload_optimizer == PlanTier::kDevice || input.stage >= 1,
                    "memory plan: offload_optimizer needs stage 1, 2 or 3 (the stage is 0)");
  COHORT_CHECK_KIND(kInvalidArgument, input.offload_params == PlanTier::kDevice || input.stage == 3,
                    "memory plan: offload_params needs stage 3, where parameters are sharded (the stage is ",
                    input.stage, ")");
  const BytesPerParam per = bytes_per_param(input.precision, input.optimizer);
  const int64_t whole = input.num_params;
  const int64_t shard = (input.num_params + input.ranks - 1) / input.ranks;  // ceil: padded partitions
  const bool offloaded = input.offload_optimizer != PlanTier::kDevice || input.offload_params != PlanTier::kDevice;
  const int64_t master_copy = input.precision == PlanPrecision::kFp32 && offloaded ? 4 : 0;
  MemoryPlan plan;
  plan.stage = input.stage;
  plan.params = per.params * (input.stage >= 3 ? shard : whole);
  plan.grads = per.grads * (input.stage >= 2 ? shard : whole);
  plan.optimizer_states = (per.optimizer_states + master_copy) * (input.stage >= 1 ? shard : whole);
  const bool grads_on_file = input.cpu_run && input.offload_optimizer == PlanTier::kNvme && input.stage >= 2;
  auto place = [&plan](PlanTier tier, int64_t bytes) {
    (tier == PlanTier::kNvme ? plan.nvme : tier == PlanTier::kHost ? plan.host : plan.device) += bytes;
  };
  plan.params_tier = input.offload_params;
  plan.optimizer_tier = input.offload_optimizer;
  plan.grads_tier = grads_on_file ? PlanTier::kNvme : PlanTier::kDevice;
  place(plan.params_tier, plan.params);
  place(plan.optimizer_tier, plan.optimizer_states);
  // A GPU with the optimizer on the host: each reduced shard goes down to an fp32 host gradient (stage
  // 2/3 keep nothing else; stage 1 also its whole gradient on the device until the boundary).
  const bool host_gradients = !input.cpu_run && input.offload_optimizer == PlanTier::kHost && input.stage >= 1;
  if (host_gradients && input.stage >= 2) {
    plan.grads = 4 * shard;
    plan.grads_tier = PlanTier::kHost;
  } else if (host_gradients) {
    place(PlanTier::kHost, 4 * shard);
    plan.grads += 4 * shard;
  }
  place(plan.grads_tier, plan.grads - (host_gradients && input.stage == 1 ? 4 * shard : 0));
  return plan;
}

PlanTier parse_plan_tier(const std::string& option, const std::string& text) {
  if (text == "none") return PlanTier::kDevice;
  if (text == "cpu") return PlanTier::kHost;
  if (text == "nvme") return PlanTier::kNvme;
  throw Error(option + "=" + text + " is not one of none, cpu, nvme", ErrorKind::kInvalidArgument);
}

PlanPrecision parse_precision(const std::string& text) {
  if (text == "fp32") return PlanPrecision::kFp32;
  if (text == "fp16") return PlanPrecision::kFp16;
  if (text == "bf16") return PlanPrecision::kBf16;
  throw Error("precision=" + text + " is not one of fp32, fp16, bf16", ErrorKind::kInvalidArgument);
}

PlanOptimizer parse_plan_optimizer(const std::string& text) {
  if (text == "adam") return PlanOptimizer::kAdam;
  if (text == "adamw") return PlanOptimizer::kAdamW;
  if (text == "sgd") return PlanOptimizer::kSgd;
  if (text == "sgd_momentum") return PlanOptimizer::kSgdMomentum;
  throw Error("optimizer=" + text + " is not one of adam, adamw, sgd, sgd_momentum", ErrorKind::kInvalidArgument);
}

std::string to_string(PlanPrecision precision) {
  switch (precision) {
    case PlanPrecision::kFp32: return "fp32";
    case PlanPrecision::kFp16: return "fp16";
    case PlanPrecision::kBf16: return "bf16";
  }
  return "?";
}

std::string to_string(PlanOptimizer optimizer) {
  switch (optimizer) {
    case PlanOptimizer::kAdam: return "adam";
    case PlanOptimizer::kAdamW: return "adamw";
    case PlanOptimizer::kSgdMomentum: return "sgd_momentum";
    case PlanOptimizer::kSgd: return "sgd";
  }
  return "?";
}

std::string describe_optimizer_states(PlanPrecision precision, PlanOptimizer optimizer) {
  std::vector<std::string> parts;
  if (precision != PlanPrecision::kFp32) parts.emplace_back("fp32 master 4");
  if (optimizer != PlanOptimizer::kSgd) parts.emplace_back("momentum 4");
  if (optimizer == PlanOptimizer::kAdam || optimizer == PlanOptimizer::kAdamW) {
    parts.emplace_back("variance 4");
  }
  if (parts.empty()) return "none";
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : " + ") + part;
  return out;
}

}  // namespace cohort::detail
