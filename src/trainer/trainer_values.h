// The user values a Trainer checkpoint carries: the global batch and samples per optimizer step, each
// saved rank's running epoch sums (MetricStore::epoch_sums_text), and the built-in callbacks' numbers.
// Checked before anything of a checkpoint is loaded (CheckpointState::check_user_values, so a damaged
// one falls back to an older checkpoint) and by cohort-ckpt verify: edited ones failed after "resumed
// from", some as a collective desync that blamed the program (hostile pass 9, S3).
#pragma once

#include <map>
#include <string>

#include "checkpoint/position_values.h"

namespace cohort::detail {

/// The user values that carry each saved rank's running training-epoch sums.
inline constexpr const char* kEpochSumsRanks = "trainer.epoch_sums.ranks";
/// How many ranks log each sample's values (the pipeline's stages all log its loss; a data-parallel
/// strategy, 1): the saved sums count each sample that many times.
inline constexpr const char* kEpochSumsReplicas = "trainer.epoch_sums.replicas";
/// One micro-batch on every share, in samples.
inline constexpr const char* kGlobalBatchKey = ckpt::kTrainerGlobalBatchKey;
std::string epoch_sums_key(int rank);

/// Throws cohort::Error (kIO) naming 'user.<key>' and its value when a value the Trainer or its
/// built-in callbacks (ModelCheckpoint, EarlyStopping) saved cannot be taken: a batch that is not a
/// positive whole number, epoch sums of another count of ranks than saved them, missing, damaged, or
/// whose synchronized names differ between ranks. Values of checkpoints that are not the Trainer's
/// (no trainer.step_batch) pass.
void check_trainer_values(const std::map<std::string, std::string>& user, int saved_world_size);

}  // namespace cohort::detail
