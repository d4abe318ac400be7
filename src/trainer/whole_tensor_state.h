// A Stateful whose tensors cut by tensor parallelism are saved whole and cut again on load, around
// another Stateful (the model's, the optimizer's): a checkpoint of whole tensors, as FSDP's
// FULL_STATE_DICT, that any tensor_parallel_size resumes, and that a run without tensor parallelism
// reads as its own.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/pretrained.h"
#include "cohort/stateful.h"
#include "tp/parameter_cuts.h"
#include "zero/parameter_state.h"

namespace cohort::detail {

/// Around `inner`: its tensor named N is gathered whole at save (a collective over the tp group) and
/// cut to this rank's part at load, when `cut_of(N)` gives its cut (null: the tensor is whole).
std::shared_ptr<Stateful> whole_tensor_state(std::shared_ptr<Stateful> inner,
                                             std::function<const tp::detail::ParameterCut*(const std::string&)> cut_of);

/// The cuts of `module`'s parameters by name, and of `optimizer`'s per-parameter states by the names
/// its checkpoint adapter gives them ("g0.p3.exp_avg": parameter 3 of group 0).
std::function<const tp::detail::ParameterCut*(const std::string&)> module_cuts(torch::nn::Module& module);
std::function<const tp::detail::ParameterCut*(const std::string&)> optimizer_cuts(torch::nn::Module& module,
                                                                                  torch::optim::Optimizer& optimizer);

/// The ZeRO engine's state by parameter under tensor parallelism (zero/parameter_state.h): a cut
/// parameter as a part of its whole tensor. Null `cut_of`: none.
std::function<std::optional<ParameterPart>(const std::string&)> tensor_parallel_part_of(
    std::function<const tp::detail::ParameterCut*(const std::string&)> cut_of);

/// Pretrained weights under tensor parallelism (checkpoint/pretrained.h): a cut tensor is read whole
/// and this rank's part cut from it, as a load of a whole-tensor checkpoint does. Null `cut_of`: none.
LocalParts tensor_parallel_parts(std::function<const tp::detail::ParameterCut*(const std::string&)> cut_of);

}  // namespace cohort::detail
