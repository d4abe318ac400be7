// What the counters among a checkpoint's saved numbers may be, by their keys as cohort's own
// adapters write them: an optimizer's per-parameter step count ('g0.p3.step') and learning rate
// ('g0.lr'), the ZeRO engine's step counts ('zero.group2.step', 'zero.global_steps',
// 'zero.skipped_steps', 'zero.micro_steps') and loss scale
// ('zero.loss_scaler.scale'). Checked where a checkpoint is staged for a resume and by cohort-ckpt
// verify alike, as the sampler's position is (sampler_values.h): an Adam step of -5 resumed to a
// model at 10% accuracy, a loss scale of 0 to NaN, while verify said OK.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/manifest.h"
#include "cohort/stateful.h"

namespace cohort::detail::ckpt {

/// The user value the Trainer saves with every checkpoint (samples per optimizer step): its presence
/// says the manifest's step is the Trainer's optimizer step.
inline constexpr const char* kTrainerStepBatchKey = "trainer.step_batch";
/// The largest learning rate a checkpoint or a ds_config may hold: none trains above it, and Adam's
/// bias correction turns a rate near a float's largest into an overflow.
inline constexpr double kLearningRateMax = 1e6;
/// Doubles (a checkpoint's numbers) count every whole number up to it.
inline constexpr double kTwoTo53 = 9007199254740992.0;

/// Throws cohort::Error (ErrorKind::kIO) naming 'values.<entry>.<key>' and its value when a step count
/// is not a whole number in [0, 2^53), a learning rate is not finite and >= 0, or a loss scale is not
/// finite and > 0. Keys of other names are not this function's.
void check_counter_values(const StateValues& values, const std::string& entry);

/// The ZeRO engine's counters against each other (skipped_steps <= global_steps <= micro_steps, each
/// group's step count at most global_steps - skipped_steps) and, when the Trainer saved them
/// (`trainer_step`: one engine step per optimizer step), global_steps against the manifest's `step`.
/// Throws cohort::Error (kIO) naming both values. Values without the engine's counters pass.
void check_counters_agree(const StateValues& values, const std::string& entry, int64_t step, bool trainer_step);

/// The counters of `entry` in `manifest` against its tensors and step: check_counters_agree, the
/// engine's numbers all there (global, skipped and micro steps, the loss scaler's four, a step count
/// per group with tensors), a group whose optimizer counts steps (Adam's exp_avg, Adagrad's sum,
/// RMSprop's square_avg) at global_steps - skipped_steps, and a step count for each optimizer
/// parameter with state tensors (its absence reads as "no state": Adam's bias correction restarted),
/// and a sampler's position against the Trainer's step (check_trainer_position). Throws cohort::Error (kIO).
void check_entry_counters(const Manifest& manifest, const std::string& entry);

/// The tensors of `entry` in `manifest` saved with a state field, as (unit, field):
/// "<entry>/group3.exp_avg" -> {"group3", "exp_avg"}, "<entry>/1.bias.step" -> {"1.bias", "step"}.
std::vector<std::pair<std::string, std::string>> state_fields_of(const Manifest& manifest, const std::string& entry);

/// Whether `values` hold any of the ZeRO engine's numbers ("zero.*"). Inline: the manifest's own
/// checks (manifest_check.cpp) use it without the rest of these.
inline bool has_engine_numbers(const StateValues& values) {
  return std::any_of(values.begin(), values.end(), [](const auto& item) { return item.first.rfind("zero.", 0) == 0; });
}

/// `key` of `values` when there: a whole number in [low, high] (`range` words the bound in the
/// message), else cohort::Error (kIO) naming 'values.<entry>.<key>' and the value.
void check_whole_value(const StateValues& values, const std::string& entry, const std::string& key, double low,
                       double high, const std::string& range);

}  // namespace cohort::detail::ckpt
