// cohort-ckpt export --format dcp: a cohort checkpoint written as PyTorch's torch.distributed.checkpoint
// (DCP) directory, which dcp.load reads into an FSDP2 or DDP model and its optimizer at any world size
// (state dicts from torch.distributed.checkpoint.state_dict.get_state_dict). Names follow the model's
// named_parameters: "model.<fqn>", "optimizer.state.<fqn>.exp_avg|exp_avg_sq|step",
// "optimizer.param_groups.0.<hyper-parameter>". Tensors are streamed piece by piece (CRC32 checked),
// cut into items of at most ExportOptions::max_item_bytes, one data file `__0_0.distcp`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail::dcp {

struct ExportOptions {
  /// Removed from the front of every parameter name (the GPT example's Trainer module holds its GPT as
  /// "gpt": "gpt." gives nanoGPT's names); a name without it is an error naming it.
  std::string prefix;
  /// Only the model's tensors: no optimizer state, no param_groups.
  bool model_only = false;
  /// The largest item: a tensor is cut along its first dimension into chunks below this.
  int64_t max_item_bytes = int64_t(1) << 30;
};

struct ExportSummary {
  int64_t tensors = 0;               ///< keys written as tensors
  int64_t objects = 0;               ///< keys written as Python objects (param_groups)
  std::vector<std::string> skipped;  ///< what a DCP state dict has no place for, each "name: why"
};

/// Writes `out_dir` (absent or empty; created) from the step directory `step_dir`. Throws cohort::Error
/// naming the tensor or value that cannot map; nothing is left in `out_dir` then but what was there.
ExportSummary export_dcp(const std::string& step_dir, const std::string& out_dir, const ExportOptions& options);

}  // namespace cohort::detail::dcp
