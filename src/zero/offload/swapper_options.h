// The options of a swap file's StateSwapper from the engine's settings: the offload section's
// directory and buffer_count, the ds_config's "aio", the rank. One place for both swap files
// (offload_optimizer's and offload_param's).
#pragma once

#include <string>

#include "zero/engine_settings.h"
#include "zero/offload/state_swapper.h"

namespace cohort::detail {

/// `section`: "offload_optimizer" or "offload_param" (errors name section.nvme_path); `what`: part
/// of the file's name ("optimizer", "param").
template <typename OffloadSection>
SwapperOptions swapper_options_of(const EngineSettings& settings, const OffloadSection& offload,
                                  const std::string& section, const std::string& what) {
  const AioConfig& aio = settings.config.aio();
  SwapperOptions options;
  options.directory = offload.nvme_path();
  options.key = section + ".nvme_path";
  options.what = what;
  options.rank = settings.rank;
  options.aio = AioOptions{aio.block_size(), aio.queue_depth(), aio.single_submit(), aio.overlap_events()};
  options.buffer_count = offload.buffer_count();
  return options;
}

}  // namespace cohort::detail
