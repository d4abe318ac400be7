// The Trainer's position in its data against its step count. A Trainer checkpoint carries, besides
// the sampler's epoch and samples_in_epoch, the position where its current stretch of steps at one
// global batch began (trainer.segment.*: the epoch, the step and the samples of that epoch, reset at
// each epoch's start and at each resume): every step since then took a known number of samples, so
// the sampler's numbers must agree with the step. An epoch or a sample count edited within its range
// resumed with no training at all, or replayed data, while verify said OK (hostile pass 9, S2).
#pragma once

#include <string>

#include "checkpoint/manifest.h"

namespace cohort::detail::ckpt {

/// One micro-batch on every data share, in samples (user value of a Trainer checkpoint).
inline constexpr const char* kTrainerGlobalBatchKey = "trainer.global_batch";
/// Where the current stretch of steps began: its epoch, its step and the samples of its epoch then.
inline constexpr const char* kSegmentEpochKey = "trainer.segment.epoch";
inline constexpr const char* kSegmentStepKey = "trainer.segment.step";
inline constexpr const char* kSegmentSamplesKey = "trainer.segment.samples";
/// The training batches of an epoch (its last optimizer step may take fewer than trainer.step_batch).
inline constexpr const char* kEpochBatchesKey = "trainer.epoch_batches";

/// When `entry` holds a sampler's numbers and the manifest the Trainer's segment: the sampler's
/// epoch is the segment's, its samples end a step (a whole step of trainer.step_batch samples, or
/// the epoch's last of trainer.epoch_batches batches, which may be short only when the epoch takes
/// every batch of dataset_size: no more than ceil(dataset_size / trainer.global_batch)) and the batches done since the
/// segment began (each of trainer.global_batch samples) make the steps taken since its step. Throws cohort::Error (kIO)
/// naming the values. Checkpoints without the segment (older ones, the user's own) pass.
void check_trainer_position(const Manifest& manifest, const std::string& entry);

/// A Trainer checkpoint (one with trainer.segment.*) holds its sampler's position: a 'sampler' entry
/// with all five numbers (check_sampler_values). Deleted or emptied, verify said OK and the resume
/// stopped or fell back (hostile pass 11, M-d). Throws cohort::Error (kIO).
void check_trainer_sampler(const Manifest& manifest);

/// A Trainer checkpoint holds every saving rank's generator state ('rng/cpu', a piece per rank): the
/// Trainer always saves it, and without it a resume draws other dropout masks (hostile pass 13, M-1).
/// Throws cohort::Error (kIO).
void check_trainer_rng(const Manifest& manifest);

}  // namespace cohort::detail::ckpt
