// The ZeRO engine's state store (src/zero/state_store.h), alone and without ranks (a store runs no
// collective, so rank r of w is only settings): the shapes each stage keeps, masters that are the
// parameters' own shard or a copy, gradient aliases, and the clearing a step and a load need.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zero/engine_settings.h"
#include "zero/partition.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace zero_state_store_test {

using cohort::detail::EngineSettings;
using cohort::detail::GroupLayout;
using cohort::detail::StateStore;
using cohort::detail::TrainableParameters;

namespace {

EngineSettings settings_of(int stage, int rank, int world) {
  EngineSettings s;
  s.stage = stage;
  s.rank = rank;
  s.world = world;
  return s;
}

// A Linear(3, 2): 6 + 2 elements in one group, padded to a multiple of the world size.
struct Fixture {
  Fixture(int stage, int rank, int world) : settings(settings_of(stage, rank, world)) {
    params = std::make_unique<TrainableParameters>(*layer, TrainableParameters::ShapeMap{});
    store = std::make_unique<StateStore>(settings, *params);
    layout = cohort::detail::group_by_size({6, 2}, 1 << 20, world).at(0);
  }
  torch::nn::Linear layer{3, 2};
  EngineSettings settings;
  std::unique_ptr<TrainableParameters> params;
  std::unique_ptr<StateStore> store;
  GroupLayout layout;
};

}  // namespace

TEST(ZeroStateStore, StageZeroKeepsEverythingWholeWithGradientAliases) {
  Fixture f(0, 0, 1);
  f.store->add_group(f.layout, torch::Tensor());
  EXPECT_EQ(f.store->parameters(0).numel(), 8);
  EXPECT_EQ(f.store->master(0).data_ptr(), f.store->parameters(0).data_ptr());  // fp32: no copy
  EXPECT_FALSE(f.store->master_is_copy(0));
  const auto& flat_grad = f.store->gradients(0).flat_grad;
  EXPECT_EQ(f.layer->weight.grad().data_ptr(), flat_grad.data_ptr());
  EXPECT_EQ(f.store->gradient_alias(1).data_ptr(), flat_grad.narrow(0, 6, 2).data_ptr());
  EXPECT_TRUE(f.store->reduced_gradient(0).is_same(flat_grad));
  EXPECT_EQ(f.store->group_of(1), 0);
}

TEST(ZeroStateStore, StageOneMasterIsTheOwnedShardOrACopy) {
  Fixture f(1, 1, 2);  // padded 8, rank 1 owns [4, 8)
  f.store->add_group(f.layout, torch::Tensor());
  EXPECT_EQ(f.store->owned_parameters(0).data_ptr(), f.store->parameters(0).narrow(0, 4, 4).data_ptr());
  EXPECT_EQ(f.store->master(0).data_ptr(), f.store->owned_parameters(0).data_ptr());

  Fixture mixed(1, 1, 2);
  mixed.settings.separate_master = true;  // bf16/fp16 compute: an fp32 copy
  mixed.store->add_group(mixed.layout, torch::Tensor());
  EXPECT_TRUE(mixed.store->master_is_copy(0));
  EXPECT_NE(mixed.store->master(0).data_ptr(), mixed.store->owned_parameters(0).data_ptr());
  EXPECT_TRUE(torch::equal(mixed.store->master(0), mixed.store->owned_parameters(0)));
}

TEST(ZeroStateStore, StageThreeKeepsTheShardAndFreesTheParameters) {
  Fixture f(3, 0, 2);
  const torch::Tensor shard = torch::arange(4, torch::kFloat);
  f.store->add_group(f.layout, shard);
  EXPECT_TRUE(f.store->shards().lend(0).is_same(shard));  // no offload: the shard itself
  f.store->shards().give_back(0);
  EXPECT_EQ(f.layer->weight.numel(), 0);  // empty until a unit's gather
  EXPECT_EQ(f.store->gradients(0).shard_grad.numel(), 4);
  EXPECT_TRUE(f.store->reduced_gradient(0).is_same(f.store->gradients(0).shard_grad));
}

TEST(ZeroStateStore, ZeroGradientsAndMasterPadding) {
  Fixture f(2, 2, 3);  // padded 9, shard 3: rank 2 owns [6, 9), of which 6 and 7 are real
  f.store->add_group(f.layout, torch::Tensor());
  auto& grads = f.store->gradients(0);
  grads.shard_grad.fill_(3);
  grads.shard_grad_clean = false;
  f.store->master(0).mutable_grad() = torch::ones({3});
  f.store->zero_gradients();
  EXPECT_EQ(grads.shard_grad.abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(grads.shard_grad_clean);
  EXPECT_FALSE(f.store->master(0).grad().defined());

  torch::NoGradGuard no_grad;
  f.store->master(0).fill_(5);
  f.store->zero_master_padding();
  EXPECT_TRUE(torch::equal(f.store->master(0), torch::tensor({5.0f, 5.0f, 0.0f})));
}

TEST(ZeroStateStore, MemoryOfParametersGradientsAndMasterCopies) {
  Fixture f(2, 0, 1);
  f.settings.separate_master = true;
  f.store->add_group(f.layout, torch::Tensor());
  cohort::MemoryReport report;
  f.store->add_memory(report);
  EXPECT_EQ(report.parameter_bytes, 8 * 4);
  EXPECT_EQ(report.gradient_bytes, 8 * 4);  // the shard (the whole group at a world of one)
  EXPECT_EQ(report.optimizer_bytes, 8 * 4);  // the fp32 copy
}

}  // namespace zero_state_store_test
