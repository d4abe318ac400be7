// The gradient kit strategies share (src/core/grad_kit.h) and what it guarantees them: hooks report
// each parameter's gradient once and are gone with their owner; a ZeRO engine destroyed while a graph
// it built lives on is never called into (stage 0-2: backward runs plain; stage 3: a clear error);
// gradient aliases survive an optimizer that sets gradients to None; comm resolution's one rule.
#include "core/grad_kit.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <optional>

#include "cohort/zero.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace grad_kit_test {

namespace {

using cohort::detail::GradHookSet;

size_t hook_count(const torch::Tensor& param) {
  return torch::autograd::impl::grad_accumulator(param)->post_hooks().size();
}

torch::nn::Sequential small_model() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
}

cohort::ZeroConfig zero_config(int stage) {
  return cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(stage)).optimizer(
      cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.1));
}

TEST(GradHookSet, ReportsEachGradientOnceAndIsGoneWithItsOwner) {
  auto model = small_model();
  const auto params = model->parameters();
  std::vector<int> calls(params.size(), 0);
  {
    GradHookSet hooks(params, [&](int64_t index) { ++calls[size_t(index)]; });
    for (const auto& p : params) EXPECT_EQ(hook_count(p), 1u);
    model->forward(torch::ones({2, 4})).sum().backward();
    EXPECT_EQ(calls, std::vector<int>(params.size(), 1));
  }
  for (const auto& p : params) EXPECT_EQ(hook_count(p), 0u);
  model->forward(torch::ones({2, 4})).sum().backward();  // no hook left to run
  EXPECT_EQ(calls, std::vector<int>(params.size(), 1));
}

TEST(GradHookSet, AHookOutlivingItsSetDoesNothing) {
  auto model = small_model();
  const auto params = model->parameters();
  int calls = 0;
  auto loss = model->forward(torch::ones({2, 4})).sum();
  std::optional<GradHookSet> hooks(std::in_place, params, [&](int64_t) { ++calls; });
  hooks.reset();  // the owner dies while the graph of `loss` lives
  loss.backward();
  EXPECT_EQ(calls, 0);
}

TEST(FlatAlias, SurvivesAnOptimizerThatSetsGradientsToNone) {
  auto param = torch::zeros({2, 3}, torch::requires_grad());
  auto flat = torch::zeros({10});
  auto alias = cohort::detail::flat_alias(flat, 4, param.sizes());
  param.mutable_grad() = alias;
  (param * 2).sum().backward();
  EXPECT_EQ(flat.narrow(0, 4, 6).sum().item<float>(), 12.f);  // AccumulateGrad wrote into the buffer
  param.mutable_grad() = torch::Tensor();                      // zero_grad(set_to_none)
  cohort::detail::relink_grad(param, alias);
  EXPECT_EQ(param.grad().data_ptr(), alias.data_ptr());
  EXPECT_EQ(flat.sum().item<float>(), 0.f);
  param.mutable_grad() = torch::full({2, 3}, 5.f);  // replaced: its values move into the buffer
  cohort::detail::relink_grad(param, alias);
  EXPECT_EQ(flat.sum().item<float>(), 30.f);
}

TEST(ZeroLifetime, EngineDestroyedBeforeBackwardLeavesNoHook) {
  for (int stage : {0, 1, 2}) {
    auto model = small_model();
    torch::Tensor loss;
    {
      auto engine = cohort::initialize(zero_config(stage), model);
      for (const auto& p : model->parameters()) EXPECT_EQ(hook_count(p), 1u) << "stage " << stage;
      loss = engine.forward(torch::ones({2, 4})).sum();
    }
    for (const auto& p : model->parameters()) EXPECT_EQ(hook_count(p), 0u) << "stage " << stage;
    loss.backward();  // the engine is gone: nothing may call into it
  }
}

TEST(ZeroLifetime, Stage3BackwardAfterTheEngineIsGoneSaysSo) {
  auto model = small_model();
  torch::Tensor loss;
  {
    auto engine = cohort::initialize(zero_config(3), model);
    loss = engine.forward(torch::ones({2, 4})).sum();
  }
  const std::string error = cohort::testing::error_of([&] { loss.backward(); });
  EXPECT_NE(error.find("ZeRO stage 3: backward reached a layer whose engine was destroyed after forward; keep "
                       "the engine alive until backward has finished"),
            std::string::npos)
      << error;
}

}  // namespace

}  // namespace grad_kit_test
