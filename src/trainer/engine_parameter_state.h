// The ZeRO engine's checkpoint state by parameter, as DCP's sharded state dict names it: each trainable
// parameter's master weight and optimizer state ("h.0.attn.c_attn.weight.master", "...exp_avg") is a
// flat tensor of the whole parameter's size, of which each rank saves and loads the elements it keeps.
// Nothing in it depends on how the engine grouped or sharded the parameters, so a checkpoint resumes
// at any data-parallel shape (flat, HSDP), stage-3 unit or bucket size, and any tensor_parallel_size:
// a parameter cut by tensor parallelism is saved in the whole tensor's order (its parts gathered over
// the tensor-parallel group while saving, a group at a time) and each rank reads the runs of its part.
// `cohort-ckpt consolidate` of it gives each parameter whole under its own name.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cohort/stateful.h"
#include "cohort/zero.h"
#include "tp/parameter_cuts.h"

namespace cohort::detail {

/// Around `engine` (which must outlive it; optimizer state in memory, not on NVMe). `cut_of(name)`: the
/// tensor-parallel cut of a parameter, null when it is whole (a null `cut_of`: nothing is cut).
std::shared_ptr<Stateful> engine_parameter_state(
    ZeroEngineCore& engine, std::function<const tp::detail::ParameterCut*(const std::string&)> cut_of);

}  // namespace cohort::detail
