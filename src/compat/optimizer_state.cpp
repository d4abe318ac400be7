// LibTorch optimizer state (see optimizer_state.h).
#include "compat/optimizer_state.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "cohort/error.h"
#include "compat/torch_facts.h"

namespace cohort::detail {

using torch::optim::OptimizerParamState;

OptimizerParamState* find_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& states = optimizer.state();
  auto it = states.find(optimizer_state_key(param));
  return it == states.end() ? nullptr : it->second.get();
}

void set_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
                     std::unique_ptr<OptimizerParamState> state) {
  auto& states = optimizer.state();
  states[optimizer_state_key(param)] = std::move(state);
}

void erase_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& states = optimizer.state();
  states.erase(optimizer_state_key(param));
}

std::vector<std::pair<const char*, torch::Tensor>> state_fields(OptimizerParamState& state, const std::string& where) {
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(&state))
    return {{"exp_avg", s->exp_avg()}, {"exp_avg_sq", s->exp_avg_sq()}, {"max_exp_avg_sq", s->max_exp_avg_sq()}};
  if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(&state))
    return {{"exp_avg", s->exp_avg()}, {"exp_avg_sq", s->exp_avg_sq()}, {"max_exp_avg_sq", s->max_exp_avg_sq()}};
  if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(&state)) return {{"momentum_buffer", s->momentum_buffer()}};
  if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(&state)) return {{"sum", s->sum()}};
  if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(&state))
    return {{"square_avg", s->square_avg()}, {"momentum_buffer", s->momentum_buffer()}, {"grad_avg", s->grad_avg()}};
  throw Error(where + ": only the states of SGD, Adam, AdamW, Adagrad and RMSprop are supported",
              ErrorKind::kInvalidArgument);
}

int64_t* step_of(OptimizerParamState& state) {
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(&state)) return &s->step();
  if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(&state)) return &s->step();
  if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(&state)) return &s->step();
  if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(&state)) return &s->step();
  return nullptr;
}

std::unique_ptr<OptimizerParamState> fresh_state(torch::optim::Optimizer& optimizer,
                                                 const torch::optim::OptimizerOptions& options,
                                                 const torch::Tensor& p) {
  auto zeros = [&] { return torch::zeros_like(p, torch::MemoryFormat::Preserve); };
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->exp_avg(zeros()).exp_avg_sq(zeros());
    if (static_cast<const torch::optim::AdamOptions&>(options).amsgrad()) s->max_exp_avg_sq(zeros());
    return s;
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(zeros()).exp_avg_sq(zeros());
    if (static_cast<const torch::optim::AdamWOptions&>(options).amsgrad()) s->max_exp_avg_sq(zeros());
    return s;
  }
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    if (static_cast<const torch::optim::SGDOptions&>(options).momentum() == 0) return nullptr;
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(zeros());
    return s;
  }
  if (dynamic_cast<torch::optim::Adagrad*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::AdagradParamState>();
    const auto& o = static_cast<const torch::optim::AdagradOptions&>(options);
    s->sum(torch::full_like(p, o.initial_accumulator_value(), torch::MemoryFormat::Preserve));
    return s;
  }
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::RMSpropParamState>();
    const auto& o = static_cast<const torch::optim::RMSpropOptions&>(options);
    s->square_avg(zeros());
    if (o.momentum() > 0) s->momentum_buffer(zeros());
    if (o.centered()) s->grad_avg(zeros());
    return s;
  }
  throw Error("only SGD, Adam, AdamW, Adagrad and RMSprop optimizers are supported", ErrorKind::kInvalidArgument);
}

}  // namespace cohort::detail
