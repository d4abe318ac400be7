// The ZeRO memory model of Rajbhandari et al. (arXiv:1910.02054, section 5): bytes per rank for the
// model states (parameters, gradients, optimizer states) of a model of psi parameters on N ranks at
// ZeRO stage 0-3. A pure function, so the planner tool (cohort-plan) and tests share one formula.
// Activations, temporary buffers and fragmentation are not model states and are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail {

/// fp32: everything in fp32. fp16/bf16: mixed precision, 2-byte parameters and gradients plus an
/// fp32 master copy of the parameters, which counts as optimizer state (the paper's K).
enum class PlanPrecision { kFp32, kFp16, kBf16 };

/// adam and adamw: two fp32 states (momentum, variance). sgd_momentum: one (the momentum buffer).
/// sgd: none (plain SGD, momentum 0).
enum class PlanOptimizer { kAdam, kAdamW, kSgdMomentum, kSgd };

/// Bytes each parameter costs, by part. optimizer_states is the paper's K.
///   precision   optimizer       params  grads  K
///   fp16/bf16   adam, adamw     2       2      12 = fp32 master 4 + momentum 4 + variance 4
///   fp16/bf16   sgd_momentum    2       2       8 = fp32 master 4 + momentum 4
///   fp16/bf16   sgd             2       2       4 = fp32 master 4
///   fp32        adam, adamw     4       4       8 = momentum 4 + variance 4
///   fp32        sgd_momentum    4       4       4 = momentum 4
///   fp32        sgd             4       4       0
struct BytesPerParam {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer_states = 0;
};
BytesPerParam bytes_per_param(PlanPrecision precision, PlanOptimizer optimizer);

/// Where offload keeps a kind of state: the compute device, host memory (cpu), or a swap file (nvme).
enum class PlanTier { kDevice, kHost, kNvme };

struct MemoryPlanInput {
  int64_t num_params = 0;  // psi, > 0
  int64_t ranks = 1;       // N, > 0
  int stage = 0;           // 0 (plain data parallel), 1, 2 or 3
  PlanPrecision precision = PlanPrecision::kFp16;
  PlanOptimizer optimizer = PlanOptimizer::kAdam;
  PlanTier offload_optimizer = PlanTier::kDevice;  // offload_optimizer.device (stage >= 1)
  PlanTier offload_params = PlanTier::kDevice;     // offload_param.device (stage 3), max_in_cpu 0
  bool cpu_run = false;  // the ranks compute on CPUs: with nvme, stage 2/3's gradient shards go on file too
};

/// Bytes one rank holds. A sharded part holds ceil(psi / N) elements per rank: DeepSpeed pads the
/// flat buffer to N equal partitions, so this is every rank's size (and exactly psi / N when N
/// divides psi). With p, g, K from bytes_per_param and S = ceil(psi / N):
///   stage 0: p psi + g psi + K psi          (the paper: (2 + 2 + K) psi = 16 psi)
///   stage 1: p psi + g psi + K S            (4 psi + K psi / N)
///   stage 2: p psi + g S   + K S            (2 psi + (2 + K) psi / N)
///   stage 3: p S   + g S   + K S            ((2 + 2 + K) psi / N)
/// With offload the fp32 master is a copy apart from the parameters also in fp32 (4 bytes per
/// parameter of the shard, counted in optimizer_states), and each part lives on its tier:
///   params            offload_params' tier (stage 3), else the device
///   optimizer_states  offload_optimizer's tier
///   grads             the device; on a CPU run with offload_optimizer nvme at stage 2/3, the file
/// device + host + nvme == total(); on a CPU run device and host are the same memory.
struct MemoryPlan {
  int stage = 0;
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer_states = 0;
  PlanTier params_tier = PlanTier::kDevice, grads_tier = PlanTier::kDevice, optimizer_tier = PlanTier::kDevice;
  int64_t device = 0;
  int64_t host = 0;
  int64_t nvme = 0;
  int64_t total() const { return params + grads + optimizer_states; }
};

/// Throws cohort::Error for num_params < 1, ranks < 1, a stage outside 0-3, or an offload the stage
/// does not have (the optimizer at stage 0, the parameters below stage 3).
MemoryPlan plan_memory(const MemoryPlanInput& input);

/// "fp32" | "fp16" | "bf16"; throws cohort::Error listing the choices.
PlanPrecision parse_precision(const std::string& text);
/// "none" | "cpu" | "nvme"; throws cohort::Error naming `option` and listing the choices.
PlanTier parse_plan_tier(const std::string& option, const std::string& text);
/// "adam" | "adamw" | "sgd" | "sgd_momentum"; throws cohort::Error listing the choices.
PlanOptimizer parse_plan_optimizer(const std::string& text);
std::string to_string(PlanPrecision precision);
std::string to_string(PlanOptimizer optimizer);
/// One line on what K holds for this pair, e.g. "fp32 master 4 + momentum 4 + variance 4".
std::string describe_optimizer_states(PlanPrecision precision, PlanOptimizer optimizer);

}  // namespace cohort::detail
