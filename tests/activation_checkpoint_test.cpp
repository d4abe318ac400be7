// cohort::checkpoint against running the callable plainly: the same outputs and gradients (inputs
// and parameters), dropout masks drawn again identically, non-tensor arguments and several outputs,
// no activation of the callable kept for backward, and units checkpointing without an engine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/activation_checkpoint.h"
#include "cohort/fsdp.h"
#include "support/errors.h"

namespace activation_checkpoint_test {
namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 8));
  }
  torch::Tensor forward(torch::Tensor x, double p) {
    auto h = torch::dropout(torch::gelu(fc1->forward(x)), p, /*train=*/true);
    return x + fc2->forward(h);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Block);

std::vector<torch::Tensor> grads_of(torch::nn::Module& m, const torch::Tensor& x) {
  std::vector<torch::Tensor> g{x.grad().clone()};
  for (auto& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

TEST(ActivationCheckpoint, GradientsEqualThePlainCallWithDropout) {
  torch::manual_seed(0);
  Block block;
  auto x = torch::randn({4, 8}, torch::requires_grad());
  torch::manual_seed(5);
  auto plain = block->forward(x, 0.3);
  plain.pow(2).sum().backward();
  auto expected = grads_of(*block, x);
  block->zero_grad();
  x.mutable_grad() = torch::Tensor();

  torch::manual_seed(5);
  auto out = cohort::checkpoint([&](const torch::Tensor& in, double p) { return block->forward(in, p); }, x, 0.3);
  EXPECT_TRUE(out.equal(plain));
  torch::randn({100});  // the generator moves on before backward: recomputation must restore it
  out.pow(2).sum().backward();
  auto got = grads_of(*block, x);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].allclose(expected[i], 1e-6, 1e-7)) << "gradient " << i;
}

TEST(ActivationCheckpoint, WithoutRestoringTheGeneratorTheMasksDiffer) {
  // The test above could pass by accident if dropout drew nothing: here it must not match.
  torch::manual_seed(0);
  Block block;
  auto x = torch::randn({4, 8}, torch::requires_grad());
  torch::manual_seed(5);
  block->forward(x, 0.3).pow(2).sum().backward();
  auto expected = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  torch::manual_seed(5);
  auto out = cohort::checkpoint_with(cohort::CheckpointOptions().preserve_rng_state(false),
                                     [&](const torch::Tensor& in) { return block->forward(in, 0.3); }, x);
  torch::randn({100});
  out.pow(2).sum().backward();
  EXPECT_FALSE(x.grad().allclose(expected));
}

TEST(ActivationCheckpoint, TupleOutputsAndParametersWithoutInputGradients) {
  torch::manual_seed(1);
  torch::nn::Linear fc(3, 3);
  auto x = torch::randn({2, 3});  // no gradient wanted for the input: the weights still get theirs
  auto [a, b] = cohort::checkpoint(
      [&](const torch::Tensor& in) { return std::make_tuple(fc->forward(in), fc->forward(in).relu()); }, x);
  (a.sum() + b.sum()).backward();
  auto got = fc->weight.grad().clone();
  fc->zero_grad();
  (fc->forward(x).sum() + fc->forward(x).relu().sum()).backward();
  EXPECT_TRUE(got.allclose(fc->weight.grad()));
}

TEST(ActivationCheckpoint, KeepsNoActivationOfTheCallable) {
  // A tanh chain saves its outputs; checkpointed, backward's graph holds only the node's inputs.
  auto x = torch::randn({1000}, torch::requires_grad());
  auto chain = [](const torch::Tensor& in) {
    auto h = in;
    for (int i = 0; i < 5; ++i) h = h.tanh();
    return h;
  };
  auto out = cohort::checkpoint(chain, x);
  ASSERT_NE(out.grad_fn(), nullptr);
  EXPECT_EQ(out.grad_fn()->name(), "cohort::CheckpointBackward");
  EXPECT_EQ(out.grad_fn()->next_edges().size(), 1u);  // straight to x's accumulator: no tanh nodes
  out.sum().backward();
  auto expected = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  chain(x).sum().backward();
  EXPECT_TRUE(x.grad().allclose(expected));
}

TEST(ActivationCheckpoint, UnitWithoutEngineCheckpointsWhenAsked) {
  torch::manual_seed(2);
  Block block;
  auto unit = cohort::fully_shard(block, cohort::UnitOptions().activation_checkpointing(true));
  auto x = torch::randn({4, 8}, torch::requires_grad());
  torch::manual_seed(9);
  auto out = unit(x, 0.0);
  EXPECT_EQ(out.grad_fn()->name(), "cohort::CheckpointBackward");
  out.sum().backward();
  auto got = grads_of(*block, x);
  block->zero_grad();
  x.mutable_grad() = torch::Tensor();
  block->forward(x, 0.0).sum().backward();
  auto expected = grads_of(*block, x);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].allclose(expected[i])) << "gradient " << i;
}

TEST(ActivationCheckpoint, MarkingAModuleTwiceIsRefused) {
  Block block;
  auto unit = cohort::fully_shard(block);
  EXPECT_EQ(cohort::testing::error_of([&] { cohort::fully_shard(block); }),
            "cohort::fully_shard: this BlockImpl is already a unit; mark each module once (keep the Unit handle "
            "and call it)");
}

}  // namespace
}  // namespace activation_checkpoint_test
