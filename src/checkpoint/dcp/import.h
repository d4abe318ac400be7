// cohort-ckpt import --format dcp: PyTorch's torch.distributed.checkpoint (DCP) directory, saved from an
// FSDP2 or DDP model and its Adam/AdamW optimizer ({"model": ..., "optimizer": ...} from get_state_dict,
// any world size), written as a cohort checkpoint of one ZeRO engine's state: each parameter's fp32
// master and moments under its name in the model (whole-shaped, sharded: any world size loads it),
// the step count, Adam's hyper-parameters. A program that adds its engine to a CheckpointState under
// ImportOptions::entry loads it with cohort::load_checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail::dcp {

struct ImportOptions {
  /// Put before every parameter name (the GPT example's Trainer module holds its GPT as "gpt": "gpt.").
  std::string prefix;
  /// The CheckpointState entry the engine is added under (the Trainer's: "engine").
  std::string entry = "engine";
  /// The ZeRO stage of the engine that loads it (a load refuses another): 3 is FSDP's.
  int zero_stage = 3;
};

struct ImportSummary {
  int64_t step = 0;        ///< the optimizer's step count, the checkpoint's step
  int64_t parameters = 0;  ///< parameters written (with their optimizer state, if any)
  int64_t buffers = 0;     ///< model tensors no optimizer steps
  std::string step_dir;    ///< what was written: <out>/step-<step>
};

/// Reads `dcp_dir` (every byte checked: the items' zip CRCs, each chunk's place in its tensor) and
/// writes the checkpoint directory `out_dir` (absent or empty). Throws cohort::Error naming the key
/// that cannot map or the file that does not read; nothing is written then.
ImportSummary import_dcp(const std::string& dcp_dir, const std::string& out_dir, const ImportOptions& options);

}  // namespace cohort::detail::dcp
