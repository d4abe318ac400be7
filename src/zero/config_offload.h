// The offload sections of a ds_config (ZeRO-Offload and ZeRO-Infinity): "offload_optimizer" and
// "offload_param" inside "zero_optimization", and the top-level "aio". Keys DeepSpeed has but cohort cannot honour are
// refused with the reason; the values are checked here, the directory when the engine starts.
#pragma once

#include "cohort/zero_config.h"
#include "zero/config_reader.h"

namespace cohort::detail::ds_config {

/// zero_optimization.offload_optimizer at `stage`.
OffloadOptimizerConfig read_offload_optimizer(Section offload, int stage);
/// zero_optimization.offload_param at `stage`.
OffloadParamConfig read_offload_param(Section offload, int stage);
/// The top-level "aio" section.
AioConfig read_aio(Section aio);

}  // namespace cohort::detail::ds_config
