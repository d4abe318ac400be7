// The per-parameter step counts an optimizer state saves as tensors (the pipeline's: "<entry>/<param>.step",
// int64, one element, beside the parameter's "<param>.exp_avg" and so on), checked where a checkpoint is
// staged for a resume and by cohort-ckpt verify alike, as the step counts among the values are
// (counter_values.h): -1, 0, 2^62 and a deleted step each verified OK and resumed (hostile pass 10, M2).
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/manifest.h"

namespace cohort::detail::ckpt {

/// Whether `r` is a step tensor: named "<entry>/<param>.step", int64, one element.
bool is_step_tensor(const TensorRecord& r);

/// The saved `value` of step tensor `r`: whole steps, at least 1 when its parameter has Adam's or
/// RMSprop's state (made at its first step), at most the manifest's step when the Trainer saved it.
/// Throws cohort::Error (kIO) naming the tensor and the value.
void check_step_tensor(const Manifest& m, const TensorRecord& r, int64_t value);

/// In an entry that saves step tensors, every parameter with state tensors has one (a deleted step
/// read as "no state"). Throws cohort::Error (kIO) naming the parameter.
void check_step_tensors_present(const Manifest& m, const std::string& entry);

}  // namespace cohort::detail::ckpt
