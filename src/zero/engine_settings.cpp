// The ZeRO engine's settings (engine_settings.h): the checks of the values the engine cannot run
// with, and the dtypes and placement the config implies.
#include "zero/engine_settings.h"

#include "cohort/error.h"
#include "core/check.h"
#include "world/resolve_comm.h"

namespace cohort::detail {
namespace {

torch::Dtype compute_dtype_of(const ZeroConfig& config) {
  COHORT_CHECK_KIND(kInvalidArgument, !(config.fp16().enabled() && config.bf16().enabled()),
                    "ZeRO engine: fp16.enabled and bf16.enabled are both true; choose one");
  if (config.fp16().enabled()) return torch::kHalf;
  if (config.bf16().enabled()) return torch::kBFloat16;
  return torch::kFloat;
}

torch::Dtype comm_dtype_of(const ZeroConfig& config, torch::Dtype compute) {
  switch (config.communication_data_type()) {
    case CommDataType::kDefault: return compute;
    case CommDataType::kFp32: return torch::kFloat;
    case CommDataType::kFp16: return torch::kHalf;
    case CommDataType::kBf16: return torch::kBFloat16;
  }
  return compute;
}

}  // namespace

EngineSettings make_engine_settings(ZeroConfig config, const EngineOptions& options) {
  EngineSettings s;
  s.comm = resolve_comm(options.comm(), "ZeRO engine");
  s.rank = s.comm->rank();
  s.world = s.comm->size();
  s.replicate = options.replicate_comm();
  if (s.replicate) s.replicas = s.replicate->size();
  s.stage = config.zero_optimization().stage();
  COHORT_CHECK_KIND(kInvalidArgument, s.stage >= 0 && s.stage <= 3,
                    "zero_optimization.stage: must be 0, 1, 2 or 3, got ", s.stage);
  s.gas = int(config.gradient_accumulation_steps());
  s.prefetch_units = options.prefetch_units();
  COHORT_CHECK_KIND(kInvalidArgument, s.prefetch_units >= 0, "EngineOptions::prefetch_units: must be >= 0, got ",
                    s.prefetch_units);
  COHORT_CHECK_KIND(kInvalidArgument, s.gas >= 1, "gradient_accumulation_steps: must be >= 1, got ", s.gas);
  s.compute_dtype = compute_dtype_of(config);
  s.comm_dtype = comm_dtype_of(config, s.compute_dtype);
  s.separate_master = s.compute_dtype != torch::kFloat;
  const OffloadDevice offload = config.zero_optimization().offload_optimizer().device();
  if (offload == OffloadDevice::kCpu) s.placement.masters = Tier::kHost;
  if (offload == OffloadDevice::kNvme) s.placement.masters = Tier::kFile;
  const OffloadDevice params = config.zero_optimization().offload_param().device();
  COHORT_CHECK_KIND(kInvalidArgument, params == OffloadDevice::kNone || s.stage == 3,
                    "zero_optimization.offload_param.device: needs stage 3, where parameters are sharded (the "
                    "stage is ",
                    s.stage, "); offload_optimizer offloads at stages 1 and 2");
  if (params == OffloadDevice::kCpu) s.placement.parameter_shards = Tier::kHost;
  if (params == OffloadDevice::kNvme) s.placement.parameter_shards = Tier::kFile;
  s.config = std::move(config);
  return s;
}

}  // namespace cohort::detail
