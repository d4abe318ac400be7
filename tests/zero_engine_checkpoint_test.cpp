// The ZeRO engine's checkpoint state (src/zero/engine_checkpoint.h), alone at a world of one: what it
// lists (masters and optimizer state per group, frozen parameters and buffers whole), the stage it
// refuses, and a load deriving the parameters from the loaded masters.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/error.h"
#include "support/errors.h"
#include "zero/engine_checkpoint.h"
#include "zero/engine_settings.h"
#include "zero/partition.h"
#include "zero/shard_optimizer.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace zero_engine_checkpoint_test {

namespace detail = cohort::detail;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

// A Linear(2, 1) with a frozen bias and a buffer, at stage 1 on one rank, with Adam and master copies.
struct Engineless {
  Engineless() {
    settings.stage = 1;
    settings.separate_master = true;  // the master a copy, so a load must write it back
    settings.config = cohort::ZeroConfig().optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam));
    layer->bias.set_requires_grad(false);
    layer->register_buffer("seen", torch::zeros({1}));
    params = std::make_unique<detail::TrainableParameters>(*layer, detail::TrainableParameters::ShapeMap{});
    store = std::make_unique<detail::StateStore>(settings, *params);
    store->add_group(detail::group_by_size({2}, 1 << 20, 1).at(0), torch::Tensor());
    optimizer = std::make_unique<detail::ShardOptimizer>(settings, *store, cohort::EngineOptions());
    checkpoint = std::make_unique<detail::EngineCheckpoint>(
        settings, detail::EngineCheckpoint::Parts{*layer, *params, *store, *optimizer});
  }
  detail::EngineSettings settings;
  torch::nn::Linear layer{2, 1};
  std::unique_ptr<detail::TrainableParameters> params;
  std::unique_ptr<detail::StateStore> store;
  std::unique_ptr<detail::ShardOptimizer> optimizer;
  std::unique_ptr<detail::EngineCheckpoint> checkpoint;
};

}  // namespace

TEST(ZeroEngineCheckpoint, ListsShardsAndWholeTensors) {
  Engineless e;
  std::vector<std::string> names;
  for (const auto& entry : e.checkpoint->state_tensors()) names.push_back(entry.name);
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names.front(), "group0.master");
  EXPECT_THAT(names, Contains("group0.exp_avg"));
  EXPECT_THAT(std::vector<std::string>(names.end() - 2, names.end()), ElementsAre("module.bias", "module.seen"));
  const auto entries = e.checkpoint->state_tensors();
  EXPECT_EQ(entries[0].kind, cohort::StateKind::kSharded);
  EXPECT_EQ(entries[0].flat_numel, 2);
  EXPECT_EQ(entries.back().kind, cohort::StateKind::kReplicated);
  EXPECT_EQ(e.checkpoint->state_values().at("zero_stage"), 1);
}

TEST(ZeroEngineCheckpoint, LoadDerivesParametersFromMastersAndRefusesAnotherStage) {
  Engineless e;
  auto values = e.checkpoint->state_values();
  values["zero.global_steps"] = 7;
  {
    torch::NoGradGuard no_grad;
    e.checkpoint->state_tensors()[0].tensor.copy_(torch::tensor({3.0f, 4.0f}));  // what a load copies in
  }
  e.checkpoint->load_state_values(values);
  EXPECT_TRUE(torch::equal(e.layer->weight.detach(), torch::tensor({{3.0f, 4.0f}})));
  EXPECT_EQ(e.optimizer->global_steps(), 7);

  values["zero_stage"] = 2;
  try {
    e.checkpoint->load_state_values(values);
    ADD_FAILURE() << "expected cohort::Error";
  } catch (const cohort::Error& error) {
    EXPECT_EQ(error.kind(), cohort::ErrorKind::kInvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr("the checkpoint was saved at stage 2 but this engine runs stage 1"));
  }
}

}  // namespace zero_engine_checkpoint_test
