// Reading and making the per-parameter state of LibTorch's optimizers (SGD, Adam, AdamW, Adagrad,
// RMSprop), shared by the checkpoint layer and the ZeRO engine's inner optimizer. LibTorch keys the
// state by the parameter's TensorImpl address (a string in 1.13, the pointer in 2.x): only this file
// knows which.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail {

/// The optimizer's state of `param`, or null when it has none yet.
torch::optim::OptimizerParamState* find_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param);
void set_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state);
void erase_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param);

/// The state's tensors by field name ("exp_avg", "momentum_buffer", ...), undefined optional ones
/// included. Throws cohort::Error starting with `where` for another optimizer's state.
std::vector<std::pair<const char*, torch::Tensor>> state_fields(torch::optim::OptimizerParamState& state,
                                                                const std::string& where);
/// The step counter of the state, or null for SGD's (which has none).
int64_t* step_of(torch::optim::OptimizerParamState& state);
/// The state the optimizer's first step would create for `param` (zeros, or Adagrad's initial
/// value); null when it creates none (SGD without momentum).
std::unique_ptr<torch::optim::OptimizerParamState> fresh_state(torch::optim::Optimizer& optimizer,
                                                               const torch::optim::OptimizerOptions& options,
                                                               const torch::Tensor& param);

}  // namespace cohort::detail
