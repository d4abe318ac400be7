// ZeRO memory model (see memory_plan.h): bytes per parameter by precision and optimizer, and bytes
// per rank by stage. Integer arithmetic throughout, so the paper's example comes out to the byte.
#include "zero/memory_plan.h"

#include <limits>
#include <vector>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {

BytesPerParam bytes_per_param(Precision precision, PlanOptimizer optimizer) {
  const bool mixed = precision != Precision::kFp32;
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
  COHORT_CHECK(input.num_params >= 1, "memory plan: num_params=", input.num_params, " must be at least 1");
  COHORT_CHECK(input.num_params <= std::numeric_limits<int64_t>::max() / 16,
               "memory plan: num_params=", input.num_params, " is too large to count in bytes");
  COHORT_CHECK(input.ranks >= 1, "memory plan: ranks=", input.ranks, " must be at least 1");
  COHORT_CHECK(input.stage >= 0 && input.stage <= 3, "memory plan: stage=", input.stage, " is not one of 0, 1, 2, 3");
  const BytesPerParam per = bytes_per_param(input.precision, input.optimizer);
  const int64_t whole = input.num_params;
  const int64_t shard = (input.num_params + input.ranks - 1) / input.ranks;  // ceil: padded partitions
  MemoryPlan plan;
  plan.stage = input.stage;
  plan.params = per.params * (input.stage >= 3 ? shard : whole);
  plan.grads = per.grads * (input.stage >= 2 ? shard : whole);
  plan.optimizer_states = per.optimizer_states * (input.stage >= 1 ? shard : whole);
  return plan;
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "fp16") return Precision::kFp16;
  if (text == "bf16") return Precision::kBf16;
  throw Error("precision=" + text + " is not one of fp32, fp16, bf16");
}

PlanOptimizer parse_plan_optimizer(const std::string& text) {
  if (text == "adam") return PlanOptimizer::kAdam;
  if (text == "adamw") return PlanOptimizer::kAdamW;
  if (text == "sgd") return PlanOptimizer::kSgd;
  if (text == "sgd_momentum") return PlanOptimizer::kSgdMomentum;
  throw Error("optimizer=" + text + " is not one of adam, adamw, sgd, sgd_momentum");
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
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

std::string describe_optimizer_states(Precision precision, PlanOptimizer optimizer) {
  std::vector<std::string> parts;
  if (precision != Precision::kFp32) parts.emplace_back("fp32 master 4");
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
