// What a sampler's saved numbers (epoch, samples_in_epoch, dataset_size, seed, shuffle) may be, checked
// where a checkpoint is staged for a resume and by cohort-ckpt verify alike: a hand-edited or damaged
// position (samples_in_epoch -1000 crashed the resume, 1e12 silently skipped the epoch) makes the
// checkpoint unusable, so a resume falls back to an older one and verify says BAD.
#pragma once

#include <string>

#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

/// Whether a manifest's values entry is a sampler's (it holds three or more of its five keys).
bool is_sampler_values(const StateValues& values);

/// Throws cohort::Error (ErrorKind::kIO) naming the key as 'values.<entry>.<key>' and its value when a
/// key is missing or not a sampler's, a number is not whole, or out of its range: epoch and dataset_size in [0, 2^53),
/// seed an int64, shuffle 0 or 1, samples_in_epoch in [0, 2 x dataset_size + world_size]. A genuine position is at most
/// one epoch padded to a whole number of samples per rank (dataset_size + world_size - 1); the Trainer's uneven_inputs
/// counts whole global batches up to dataset_size, the pipeline example real samples; the bound is
/// looser than either. `world_size` is the saving world's (the manifest's).
void check_sampler_values(const StateValues& values, const std::string& entry, int world_size);

}  // namespace cohort::detail::ckpt
