// Checkpoints of the Fashion-MNIST job: --checkpoint-dir DIR --checkpoint-every K --resume
// auto|never|PATH. What is saved (the network, Adam's state, the sampler's epoch and position, the
// step counter) is enough to continue exactly where a killed run stopped, so a run restarted by
// cohortrun ends with the same params-sha256 as one that was never interrupted.
#pragma once

#include <cohort/checkpoint.h>

#include <cstdint>
#include <string>

#include "train.h"

namespace fashion_mnist {

class Checkpointing {
 public:
  /// `state` holds references to the job's network, optimizer and sampler position.
  Checkpointing(const TrainConfig& config, cohort::CheckpointState state);

  /// Loads what --resume says (auto: the latest checkpoint in --checkpoint-dir if there is one;
  /// never; or a checkpoint directory or step directory, which must exist). Returns the line to
  /// print, or "" when the job starts from scratch.
  std::string resume();
  /// Saves when --checkpoint-dir is set and `step` is a multiple of --checkpoint-every, or when
  /// `last` (the final state) and it was not just saved.
  void after_step(int64_t step, bool last);
  const cohort::CheckpointState& state() const { return state_; }
  cohort::CheckpointState& state() { return state_; }

 private:
  TrainConfig config_;
  cohort::CheckpointState state_;
  int64_t saved_step_ = -1;
};

}  // namespace fashion_mnist
