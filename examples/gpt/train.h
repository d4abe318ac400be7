// The GPT example's job: its flags (nanoGPT's names) and the training run they describe.
#pragma once

#include <cstdint>
#include <string>

#include "../common/checkpoint_flags.h"
#include "text.h"

namespace gpt_example {

struct Flags {
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
  double dropout = 0.0;
  bool bias = true;
  int64_t batch_size = 16;  ///< sequences per step on each rank
  int64_t max_steps = 200;
  int64_t eval_interval = 50, eval_iters = 8;
  double lr = 2e-3, weight_decay = 0.1;
  std::string optimizer = "adamw";  ///< adamw, or sgd (with --momentum)
  double momentum = 0.9;            ///< sgd's momentum (0: plain SGD)
  int64_t seed = 1337;
  std::string devices = "auto";
  std::string strategy = "fsdp";
  int64_t tensor_parallel = 1;     ///< ranks per tensor-parallel group (Megatron's split of each block)
  int64_t dp_replicate = 0;        ///< HSDP replicas (0: the Trainer's default, one per node at stage 3)
  int64_t dp_shard = -1;           ///< ranks per HSDP replica (-1: the rest)
  bool sequence_parallel = false;  ///< with tensor_parallel: the residual stream split along the sequence
  int64_t pipeline_parallel = 1;   ///< pipeline stages (--pp): the GPT cut into this many stages
  int64_t pp_microbatches = 0;     ///< microbatches per step with --pp (0: as many as stages)
  std::string pp_schedule = "1f1b";
  bool activation_checkpointing = false;
  bool keep_gathered = false;  ///< reshard_after_forward off
  int64_t sample_tokens = 300;
  int64_t threads = 0;
  std::string data = kDefaultText;
  std::string offload_optimizer = "none";  ///< none, cpu or nvme (ZeRO-Offload / ZeRO-Infinity)
  std::string offload_params = "none";     ///< none, cpu or nvme (zero3/fsdp's parameter shards)
  std::string nvme_path;                   ///< the swap files' directory with --offload-optimizer nvme
  bool no_memory_check = false;          ///< skip the check that the model and a step fit in the memory available
  std::string precision = "32-true";  ///< TrainerOptions.precision: 32-true or bf16-mixed
  std::string export_path;         ///< --export: the whole model as safetensors at the end
  std::string init_from;           ///< --init-from: pretrained weights (safetensors) at the start
  examples::CheckpointFlags checkpoint;  ///< --checkpoint-dir, --checkpoint-every, --resume
};

/// Trains and prints "val loss X" and a memory line every eval_interval steps (and at the end), a
/// sample of generated text, and "params-sha256: ..." (rank 0).
void run_training(const Flags& flags);

}  // namespace gpt_example
