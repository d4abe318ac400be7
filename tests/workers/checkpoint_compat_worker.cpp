// Writes or checks a checkpoint whose contents are known without any LibTorch arithmetic, so that a
// checkpoint written by a build against one LibTorch (1.13) can be checked by a build against another
// (2.x) and back: tests/compat/checkpoint_across_versions.sh runs `save` in one and `check` in the other.
//   checkpoint_compat_worker save DIR   |   checkpoint_compat_worker check DIR
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "cohort/checkpoint.h"
#include "compat/optimizer_state.h"

namespace {

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::Tanh(), torch::nn::Linear(3, 2));
}

// Parameter i's values and Adam moments, from its index alone (no RNG, no math kernels).
torch::Tensor expected_param(int i, const torch::Tensor& like) {
  return torch::arange(like.numel(), torch::kFloat).add_(100 * i).div_(64).view(like.sizes());
}
torch::Tensor expected_exp_avg(int i, const torch::Tensor& like) { return torch::full(like.sizes(), 0.25f * i); }
torch::Tensor expected_exp_avg_sq(int i, const torch::Tensor& like) { return torch::full(like.sizes(), 0.5f + i); }

void fill(torch::nn::Sequential& model, torch::optim::Adam& adam) {
  torch::NoGradGuard no_grad;
  auto params = model->parameters();
  for (int i = 0; i < int(params.size()); ++i) {
    params[i].copy_(expected_param(i, params[i]));
    auto state = std::make_unique<torch::optim::AdamParamState>();
    state->step(7 + i);
    state->exp_avg(expected_exp_avg(i, params[i]));
    state->exp_avg_sq(expected_exp_avg_sq(i, params[i]));
    cohort::detail::set_param_state(adam, params[i], std::move(state));
  }
}

int check(torch::nn::Sequential& model, torch::optim::Adam& adam) {
  auto params = model->parameters();
  int wrong = 0;
  for (int i = 0; i < int(params.size()); ++i) {
    auto* state = dynamic_cast<torch::optim::AdamParamState*>(cohort::detail::find_param_state(adam, params[i]));
    const bool ok = params[i].equal(expected_param(i, params[i])) && state != nullptr && state->step() == 7 + i &&
                    state->exp_avg().equal(expected_exp_avg(i, params[i])) &&
                    state->exp_avg_sq().equal(expected_exp_avg_sq(i, params[i]));
    if (!ok) std::cerr << "checkpoint_compat_worker: parameter " << i << " or its Adam state differs\n";
    wrong += ok ? 0 : 1;
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "save" && std::string(argv[1]) != "check")) {
    std::cerr << "usage: checkpoint_compat_worker save|check DIR\n";
    return 2;
  }
  auto model = make_model();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.003));
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", adam);
  if (std::string(argv[1]) == "save") {
    fill(model, adam);
    cohort::save_checkpoint(argv[2], state.set_step(42).set("written_by", TORCH_VERSION));
    std::cout << "saved with LibTorch " << TORCH_VERSION << "\n";
    return 0;
  }
  const auto loaded = cohort::load_checkpoint(argv[2], state);
  if (!loaded) {
    std::cerr << "checkpoint_compat_worker: no checkpoint in " << argv[2] << "\n";
    return 1;
  }
  const int wrong = check(model, adam) + (state.step() == 42 ? 0 : 1);
  std::cout << "LibTorch " << TORCH_VERSION << " loaded a checkpoint written by LibTorch "
            << state.get("written_by", "?") << ": " << (wrong == 0 ? "identical" : "DIFFERENT") << "\n";
  return wrong == 0 ? 0 : 1;
}
