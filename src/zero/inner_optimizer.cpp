// LibTorch optimizers over ZeRO shards (see inner_optimizer.h).
#include "zero/inner_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "cohort/error.h"
#include "compat/optimizer_state.h"
#include "core/check.h"
#include "zero/host_adam.h"

namespace cohort::detail {

std::unique_ptr<torch::optim::Optimizer> make_inner_optimizer(const OptimizerConfig& config,
                                                              std::vector<torch::Tensor> shards, bool fused_on_host) {
  const auto betas = std::make_tuple(config.betas()[0], config.betas()[1]);
  switch (config.type()) {
    case OptimizerType::kSgd:
      return std::make_unique<torch::optim::SGD>(shards, torch::optim::SGDOptions(config.lr())
                                                             .momentum(config.momentum())
                                                             .dampening(config.dampening())
                                                             .nesterov(config.nesterov())
                                                             .weight_decay(config.weight_decay()));
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      if (config.decoupled_weight_decay()) {
        auto options = torch::optim::AdamWOptions(config.lr())
                           .betas(betas)
                           .eps(config.eps())
                           .weight_decay(config.weight_decay())
                           .amsgrad(config.amsgrad());
        if (fused_on_host) return std::make_unique<HostAdamW>(shards, options);
        return std::make_unique<torch::optim::AdamW>(shards, options);
      } else {
        auto options = torch::optim::AdamOptions(config.lr())
                           .betas(betas)
                           .eps(config.eps())
                           .weight_decay(config.weight_decay())
                           .amsgrad(config.amsgrad());
        if (fused_on_host) return std::make_unique<HostAdam>(shards, options);
        return std::make_unique<torch::optim::Adam>(shards, options);
      }
    case OptimizerType::kNone: break;
  }
  throw Error(
      "ZeRO engine: the config has no \"optimizer\" section; add one ({\"type\": \"Adam\", \"params\": "
      "{\"lr\": 0.001}}) or pass EngineOptions().optimizer_factory(...)",
      ErrorKind::kInvalidArgument);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double learning_rate(torch::optim::Optimizer& optimizer) {
  COHORT_CHECK_KIND(kInvalidArgument, !optimizer.param_groups().empty(),
                    "ZeRO engine: the optimizer has no parameter group");
  return optimizer.param_groups().front().options().get_lr();
}

namespace {

template <typename Options>
void save_adam(const Options& o, bool decoupled, std::map<std::string, double>& values) {
  values["zero.adam.lr"] = o.lr();
  values["zero.adam.beta1"] = std::get<0>(o.betas());
  values["zero.adam.beta2"] = std::get<1>(o.betas());
  values["zero.adam.eps"] = o.eps();
  values["zero.adam.weight_decay"] = o.weight_decay();
  values["zero.adam.amsgrad"] = o.amsgrad() ? 1.0 : 0.0;
  values["zero.adam.decoupled"] = decoupled ? 1.0 : 0.0;
}

}  // namespace

void save_hyperparameters(torch::optim::Optimizer& optimizer, std::map<std::string, double>& values) {
  if (optimizer.param_groups().empty()) return;
  const auto& options = optimizer.param_groups().front().options();
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) save_adam(*adamw, true, values);
  else if (auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) save_adam(*adam, false, values);
}

std::vector<std::pair<std::string, torch::Tensor>> state_tensors_of(torch::optim::Optimizer& optimizer,
                                                                    const torch::Tensor& param) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto* state = find_param_state(optimizer, param);
  if (state == nullptr) return out;
  for (const auto& [field, t] : state_fields(*state, "ZeRO engine"))
    if (t.defined()) out.emplace_back(field, t);
  return out;
}

void create_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  if (find_param_state(optimizer, param) != nullptr) return;
  const auto& options = optimizer.param_groups().front().options();
  // LibTorch's first SGD step clones the gradient into the buffer: a zero buffer gives the same
  // result only without dampening.
  if (auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options); sgd && sgd->dampening() != 0) return;
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  try {
    state = fresh_state(optimizer, options, param);
  } catch (const Error&) {
    return;  // an optimizer type of the user's own (optimizer_factory): it makes its state itself
  }
  if (state) set_param_state(optimizer, param, std::move(state));
}

int64_t step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto* state = find_param_state(optimizer, param);
  const int64_t* step = state ? step_of(*state) : nullptr;
  return step ? *step : 0;
}

void set_step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& param, int64_t step) {
  auto* state = find_param_state(optimizer, param);
  if (int64_t* mine = state ? step_of(*state) : nullptr) *mine = step;
}

}  // namespace cohort::detail
