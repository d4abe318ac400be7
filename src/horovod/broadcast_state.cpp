// hvd::broadcast_parameters and hvd::broadcast_optimizer_state: a model's tensors and an optimizer's
// state become the root's on every rank. Each tensor is broadcast under its name, so ranks whose
// models differ fail naming the tensor and every rank's shape. The optimizer's per-parameter states
// (which a rank may lack, e.g. before its first step, or have when the root has none) are first made
// to exist where the root has them, then their tensors, step counts and the groups' learning rates
// are copied.
#include <torch/csrc/autograd/grad_mode.h>

#include "compat/optimizer_state.h"
#include "core/check.h"
#include "horovod/context.h"

namespace cohort::hvd {
namespace {

using cohort::detail::find_param_state;

// The optimizer's parameters as "g<group>.p<index>" (the checkpoint layer's naming) and tensors.
std::vector<std::pair<std::string, torch::Tensor>> optimizer_params(torch::optim::Optimizer& optimizer) {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params().size(); ++i)
      params.emplace_back("g" + std::to_string(g) + ".p" + std::to_string(i), groups[g].params()[i]);
  return params;
}

size_t group_of(const std::string& name) { return std::stoul(name.substr(1, name.find('.') - 1)); }

// Root's view, broadcast: per parameter whether it has a state and its step count, per group its lr.
struct StateShape {
  torch::Tensor has_state, steps, lrs;
};

StateShape root_state_shape(torch::optim::Optimizer& optimizer,
                            const std::vector<std::pair<std::string, torch::Tensor>>& params, int root) {
  const auto n = int64_t(params.size());
  StateShape shape{torch::zeros({n}, torch::kLong), torch::zeros({n}, torch::kLong),
                   torch::zeros({int64_t(optimizer.param_groups().size())}, torch::kDouble)};
  for (int64_t i = 0; i < n; ++i) {
    auto* state = find_param_state(optimizer, params[i].second);
    shape.has_state[i] = int64_t(state != nullptr);
    if (state != nullptr)
      if (const int64_t* step = cohort::detail::step_of(*state)) shape.steps[i] = *step;
  }
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g)
    shape.lrs[int64_t(g)] = optimizer.param_groups()[g].options().get_lr();
  std::vector<Handle> handles{broadcast_async_(shape.has_state, root, "optimizer.has_state"),
                              broadcast_async_(shape.steps, root, "optimizer.steps"),
                              broadcast_async_(shape.lrs, root, "optimizer.lr")};
  for (Handle h : handles) synchronize(h);
  return shape;
}

}  // namespace

void broadcast_parameters(const torch::OrderedDict<std::string, torch::Tensor>& named_tensors, int root_rank) {
  detail::Context::get("hvd::broadcast_parameters");
  std::vector<Handle> handles;
  for (const auto& item : named_tensors) handles.push_back(broadcast_async_(item.value(), root_rank, item.key()));
  for (Handle h : handles) synchronize(h);
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank) {
  const char* caller = "hvd::broadcast_optimizer_state";
  detail::Context::get(caller);
  const auto params = optimizer_params(optimizer);
  StateShape root = root_state_shape(optimizer, params, root_rank);
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g)
    optimizer.param_groups()[g].options().set_lr(root.lrs[int64_t(g)].item<double>());
  std::vector<Handle> handles;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, param] = params[i];
    if (root.has_state[int64_t(i)].item<int64_t>() == 0) {
      cohort::detail::erase_param_state(optimizer, param);  // the root has none yet: neither do we
      continue;
    }
    if (find_param_state(optimizer, param) == nullptr) {
      auto fresh = cohort::detail::fresh_state(optimizer, optimizer.param_groups()[group_of(name)].options(), param);
      COHORT_CHECK_KIND(kDesync, fresh != nullptr, caller, ": rank ", root_rank, " has a state for ", name,
                        " but this optimizer keeps none (SGD without momentum?): the ranks' optimizers differ");
      cohort::detail::set_param_state(optimizer, param, std::move(fresh));
    }
    auto& state = *find_param_state(optimizer, param);
    if (int64_t* step = cohort::detail::step_of(state)) *step = root.steps[int64_t(i)].item<int64_t>();
    // Undefined optional fields (max_exp_avg_sq without amsgrad) follow the options, equal on every rank.
    for (const auto& [field, tensor] : cohort::detail::state_fields(state, std::string(caller) + " of " + name))
      if (tensor.defined()) handles.push_back(broadcast_async_(tensor, root_rank, "optimizer." + name + "." + field));
  }
  for (Handle h : handles) synchronize(h);
}

}  // namespace cohort::hvd
