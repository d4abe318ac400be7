// LibTorch optimizers over ZeRO shards (see inner_optimizer.h).
#include "zero/inner_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <type_traits>

#include "cohort/error.h"

namespace cohort::detail {
namespace {

// LibTorch 1.13 keys optimizer state by the tensor's impl address printed as a string; 2.x by the
// address itself. Ask the map which.
template <typename Map>
typename Map::key_type state_key(const Map&, const torch::Tensor& param) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    return c10::guts::to_string(param.unsafeGetTensorImpl());
  } else {
    return static_cast<typename Map::key_type>(param.unsafeGetTensorImpl());
  }
}

torch::optim::OptimizerParamState* find_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& states = optimizer.state();
  auto it = states.find(state_key(states, param));
  return it == states.end() ? nullptr : it->second.get();
}

template <typename State>
void adam_like_tensors(State& s, std::vector<std::pair<std::string, torch::Tensor>>& out) {
  out.emplace_back("exp_avg", s.exp_avg());
  out.emplace_back("exp_avg_sq", s.exp_avg_sq());
  if (s.max_exp_avg_sq().defined()) out.emplace_back("max_exp_avg_sq", s.max_exp_avg_sq());
}

template <typename State, typename Options>
void create_adam_like(torch::optim::Optimizer& optimizer, const Options& options, const torch::Tensor& param) {
  auto state = std::make_unique<State>();
  state->step(0);
  state->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
  state->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
  if (options.amsgrad()) state->max_exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
  auto& states = optimizer.state();
  states[state_key(states, param)] = std::move(state);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_inner_optimizer(const OptimizerConfig& config,
                                                              std::vector<torch::Tensor> shards) {
  const auto betas = std::make_tuple(config.betas()[0], config.betas()[1]);
  switch (config.type()) {
    case OptimizerType::kSgd:
      return std::make_unique<torch::optim::SGD>(
          shards, torch::optim::SGDOptions(config.lr())
                      .momentum(config.momentum())
                      .dampening(config.dampening())
                      .nesterov(config.nesterov())
                      .weight_decay(config.weight_decay()));
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      if (config.decoupled_weight_decay())
        return std::make_unique<torch::optim::AdamW>(shards, torch::optim::AdamWOptions(config.lr())
                                                                 .betas(betas)
                                                                 .eps(config.eps())
                                                                 .weight_decay(config.weight_decay())
                                                                 .amsgrad(config.amsgrad()));
      return std::make_unique<torch::optim::Adam>(shards, torch::optim::AdamOptions(config.lr())
                                                              .betas(betas)
                                                              .eps(config.eps())
                                                              .weight_decay(config.weight_decay())
                                                              .amsgrad(config.amsgrad()));
    case OptimizerType::kNone:
      break;
  }
  throw Error(
      "ZeRO engine: the config has no \"optimizer\" section; add one ({\"type\": \"Adam\", \"params\": "
      "{\"lr\": 0.001}}) or pass EngineOptions().optimizer_factory(...)");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double learning_rate(torch::optim::Optimizer& optimizer) {
  COHORT_CHECK(!optimizer.param_groups().empty(), "ZeRO engine: the optimizer has no parameter group");
  return optimizer.param_groups().front().options().get_lr();
}

std::vector<std::pair<std::string, torch::Tensor>> state_tensors_of(torch::optim::Optimizer& optimizer,
                                                                    const torch::Tensor& param) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto* state = find_state(optimizer, param);
  if (state == nullptr) return out;
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state)) {
    adam_like_tensors(*adam, out);
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state)) {
    adam_like_tensors(*adamw, out);
  } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state)) {
    if (sgd->momentum_buffer().defined()) out.emplace_back("momentum_buffer", sgd->momentum_buffer());
  } else {
    throw Error("ZeRO engine: cannot read the state of this optimizer type (SGD, Adam and AdamW are supported)");
  }
  return out;
}

void create_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  if (find_state(optimizer, param) != nullptr) return;
  if (auto* adam = dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    create_adam_like<torch::optim::AdamParamState>(
        optimizer, static_cast<torch::optim::AdamOptions&>(adam->param_groups().front().options()), param);
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    create_adam_like<torch::optim::AdamWParamState>(
        optimizer, static_cast<torch::optim::AdamWOptions&>(adamw->param_groups().front().options()), param);
  } else if (auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    auto& options = static_cast<torch::optim::SGDOptions&>(sgd->param_groups().front().options());
    // LibTorch's first SGD step clones the gradient into the buffer: a zero buffer gives the same
    // result only without dampening.
    if (options.momentum() == 0 || options.dampening() != 0) return;
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    auto& states = optimizer.state();
    states[state_key(states, param)] = std::move(state);
  }
}

int64_t step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto* state = find_state(optimizer, param);
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state)) return adam->step();
  if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state)) return adamw->step();
  return 0;
}

void set_step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& param, int64_t step) {
  auto* state = find_state(optimizer, param);
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state)) adam->step(step);
  if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state)) adamw->step(step);
}

}  // namespace cohort::detail
