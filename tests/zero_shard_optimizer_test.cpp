// The ZeRO engine's optimizer step (src/zero/shard_optimizer.h), alone at a world of one (its
// collectives are the overflow flag, the norm and the stage 1/2 gather, all skipped for one rank):
// accumulation boundaries, clipping to the global norm, an fp16 overflow skipping the step, and its
// counters saved and loaded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "zero/engine_settings.h"
#include "zero/partition.h"
#include "zero/shard_optimizer.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace zero_shard_optimizer_test {

using cohort::detail::EngineSettings;
using cohort::detail::ShardOptimizer;
using cohort::detail::StateStore;
using cohort::detail::TrainableParameters;

namespace {

// One parameter of two elements, (1, 2), in one stage 0 group: its gradient is the group's flat_grad.
struct Fixture {
  explicit Fixture(cohort::ZeroConfig config) {
    settings.config = config.optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.5));
    settings.gas = int(settings.config.gradient_accumulation_steps());
    torch::NoGradGuard no_grad;
    model->register_parameter("w", torch::tensor({1.0f, 2.0f}));
    params = std::make_unique<TrainableParameters>(*model, TrainableParameters::ShapeMap{});
    store = std::make_unique<StateStore>(settings, *params);
    store->add_group(cohort::detail::group_by_size({2}, 1 << 20, 1).at(0), torch::Tensor());
    optimizer = std::make_unique<ShardOptimizer>(settings, *store, cohort::EngineOptions());
  }
  void set_gradient(std::vector<float> values) {
    torch::NoGradGuard no_grad;
    store->gradients(0).flat_grad.copy_(torch::tensor(values));
  }
  torch::Tensor weight() const { return params->at(0).detach().clone(); }

  EngineSettings settings;
  std::shared_ptr<torch::nn::Module> model = std::make_shared<torch::nn::Module>();
  std::unique_ptr<TrainableParameters> params;
  std::unique_ptr<StateStore> store;
  std::unique_ptr<ShardOptimizer> optimizer;
};

}  // namespace

TEST(ZeroShardOptimizer, StepsAtTheBoundaryOnly) {
  Fixture f(cohort::ZeroConfig().gradient_accumulation_steps(2));
  EXPECT_FALSE(f.optimizer->at_boundary());
  f.set_gradient({2, 4});
  f.optimizer->step();  // the first micro-step: nothing
  EXPECT_TRUE(torch::equal(f.weight(), torch::tensor({1.0f, 2.0f})));
  EXPECT_TRUE(f.optimizer->at_boundary());
  f.optimizer->step();  // SGD, lr 0.5
  EXPECT_TRUE(torch::allclose(f.weight(), torch::tensor({0.0f, 0.0f})));
  EXPECT_EQ(f.optimizer->global_steps(), 1);
  EXPECT_EQ(f.store->gradients(0).flat_grad.abs().sum().item<float>(), 0.0f);  // zeroed for the next
}

TEST(ZeroShardOptimizer, ClipsToTheGlobalNorm) {
  Fixture f(cohort::ZeroConfig().gradient_clipping(1.0));
  f.set_gradient({3, 4});  // norm 5: scaled to norm 1, (0.6, 0.8)
  f.optimizer->step();
  EXPECT_NEAR(f.optimizer->last_gradient_norm(), 5.0, 1e-6);
  EXPECT_TRUE(torch::allclose(f.weight(), torch::tensor({1.0f - 0.3f, 2.0f - 0.4f}), 1e-5));
}

TEST(ZeroShardOptimizer, Fp16OverflowSkipsTheStep) {
  Fixture f(cohort::ZeroConfig().fp16(cohort::Fp16Config().enabled(true).initial_scale_power(4).hysteresis(1)));
  EXPECT_EQ(f.optimizer->loss_scale(), 16.0);
  f.set_gradient({std::numeric_limits<float>::infinity(), 1});
  f.optimizer->step();
  EXPECT_TRUE(f.optimizer->last_step_skipped());
  EXPECT_EQ(f.optimizer->skipped_steps(), 1);
  EXPECT_EQ(f.optimizer->global_steps(), 1);
  EXPECT_EQ(f.optimizer->loss_scale(), 8.0);
  EXPECT_TRUE(torch::equal(f.weight(), torch::tensor({1.0f, 2.0f})));
  f.set_gradient({8, 16});  // unscaled at the new scale: (1, 2)
  f.optimizer->step();
  EXPECT_FALSE(f.optimizer->last_step_skipped());
  EXPECT_TRUE(torch::allclose(f.weight(), torch::tensor({0.5f, 1.0f})));
}

TEST(ZeroShardOptimizer, SavesAndLoadsItsCounters) {
  Fixture f(cohort::ZeroConfig().gradient_accumulation_steps(2));
  for (int i = 0; i < 5; ++i) f.optimizer->step();
  cohort::StateValues values;
  f.optimizer->save(values);
  EXPECT_EQ(values.at("zero.global_steps"), 2);
  EXPECT_EQ(values.at("zero.micro_steps"), 5);
  Fixture g(cohort::ZeroConfig().gradient_accumulation_steps(2));
  g.optimizer->load(values);
  EXPECT_EQ(g.optimizer->global_steps(), 2);
  // A checkpoint holds no partial gradients: the resume begins a window of 2 micro-steps.
  EXPECT_FALSE(g.optimizer->at_boundary());
  g.optimizer->step();
  EXPECT_TRUE(g.optimizer->at_boundary());
}

// Hostile pass 11, S-a: saved at 6 micro-steps (3 steps of 2) and resumed on half the ranks with 4
// per step (the same samples per step), the engine's boundary was (6 + 1) % 4 and disagreed with
// the Trainer's, which counts from the resume.
TEST(ZeroShardOptimizer, AResumeAtAnotherAccumulationBeginsAWindow) {
  Fixture f(cohort::ZeroConfig().gradient_accumulation_steps(2));
  for (int i = 0; i < 6; ++i) f.optimizer->step();
  cohort::StateValues values;
  f.optimizer->save(values);
  EXPECT_EQ(values.at("zero.global_steps"), 3);
  Fixture g(cohort::ZeroConfig().gradient_accumulation_steps(4));
  g.optimizer->load(values);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(g.optimizer->at_boundary()) << "micro-step " << i;
    g.optimizer->step();
  }
  EXPECT_TRUE(g.optimizer->at_boundary());
  g.optimizer->step();
  EXPECT_EQ(g.optimizer->global_steps(), 4);
}

}  // namespace zero_shard_optimizer_test
