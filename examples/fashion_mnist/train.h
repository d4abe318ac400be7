// The Fashion-MNIST job itself, on cohort::Trainer: load the data, train the CNN under DDP (or the
// ZeRO engine), evaluate exactly over all ranks after each epoch and print the digest. Without a
// launcher, --devices N starts N local workers. main.cpp only turns the command line into a TrainConfig.
#pragma once

#include <cohort/data.h>

#include <cstdint>
#include <string>

#include "../common/checkpoint_flags.h"

namespace fashion_mnist {

/// What the command line sets (see main.cpp for the flags and docs/fashion_mnist.md).
struct TrainConfig {
  int epochs = 2;
  int64_t batch_size = 64;  ///< per rank (replica under dp); the global batch is batch_size * world size (* replicas)
  double lr = 1e-3;         ///< of Adam
  int64_t seed = 0;
  int threads = 0;        ///< torch threads per rank; 0: usable cores / ranks on this node, min 1
  bool oversubscribe = false;  ///< allow more threads than usable cores / ranks on this node
  bool no_memory_check = false;  ///< skip the check that one step's estimated memory fits
  int64_t max_steps = 0;  ///< stop after this many optimizer steps in all; 0: no limit
  std::string data_dir = cohort::data::kFashionMnistDir;
  /// Rank 0's progress bar: auto (redrawn in place on a terminal, else a line every ~10%), bar,
  /// lines or off. mpirun gives ranks a pseudo-terminal, so its logs want "lines".
  std::string progress = "auto";
  /// Where checkpoints go ("" = none), every how many steps, and what to resume from: "auto" (the
  /// latest in checkpoint.dir, if any), "never", or a checkpoint path. See checkpointing.h.
  examples::CheckpointFlags checkpoint;
  /// Train with the ZeRO engine at this stage (0-3) instead of DDP; -1: DDP. Overrides the stage of
  /// deepspeed_config when both are given.
  int zero_stage = -1;
  /// A DeepSpeed ds_config.json: train with the ZeRO engine as it says ("" = DDP, unless zero_stage).
  std::string deepspeed_config;
  /// The Trainer's devices (processes on this node; "auto": the launcher's), strategy and precision.
  std::string devices = "auto";
  std::string strategy = "ddp";
  std::string precision = "32-true";
  /// DDP gradient compression (TrainerOptions.ddp_comm_hook): "", fp16, bf16, powersgd,
  /// batched_powersgd; PowerSGD's rank and the steps of plain averaging before it starts.
  std::string ddp_comm_hook;
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_iter = 1000;
};

/// Runs the whole job; rank 0 prints progress, one summary line per epoch and `params-sha256:
/// <hex>`. Throws cohort::Error (missing data, a failed collective) with a one-line message.
void run_training(const TrainConfig& config);

}  // namespace fashion_mnist
