// The per-parameter step counts an optimizer state saves as tensors (the pipeline's: "<entry>/<param>.step",
// int64, one element, beside the parameter's "<param>.exp_avg" and so on), checked where a checkpoint is
// staged for a resume and by cohort-ckpt verify alike, as the step counts among the values are
// (counter_values.h): -1, 0, 2^62 and a deleted step each verified OK and resumed (hostile pass 10, M2).
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/manifest.h"

namespace cohort::detail::ckpt {

/// The number a pipeline's optimizer entry saves from format version 4 on: how many trainable parameters
/// the whole pipeline has, each with a step tensor.
inline constexpr const char* kPipelineParamsKey = "pipeline.params";

/// Whether `r` is a step tensor: named "<entry>/<param>.step", int64, one element.
bool is_step_tensor(const TensorRecord& r);

/// The saved `value` of step tensor `r`: whole steps, -1 when its parameter has no state, at least 1
/// when it has Adam's or RMSprop's state (made at its first step), at most the manifest's step when the Trainer saved
/// it. Throws cohort::Error (kIO) naming the tensor and the value.
void check_step_tensor(const Manifest& m, const TensorRecord& r, int64_t value);

/// In an entry that saves step tensors, every parameter with state tensors has one (a deleted step
/// read as "no state"), and there are as many as its 'pipeline.params' says when it has that number.
/// Throws cohort::Error (kIO) naming the parameter or the number.
void check_step_tensors_present(const Manifest& m, const std::string& entry);

}  // namespace cohort::detail::ckpt
