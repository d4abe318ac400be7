// The ZeRO engine's trainable parameters (src/zero/trainable_parameters.h), alone: which parameters
// count (tied once, frozen never), their whole shapes, and pointing their data at a flat group, a
// gathered unit or nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/error.h"
#include "support/errors.h"
#include "zero/partition.h"
#include "zero/trainable_parameters.h"

namespace zero_trainable_parameters_test {

using cohort::detail::GroupLayout;
using cohort::detail::TrainableParameters;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

// Two trainable tensors, a frozen one, and the first registered again under a second name (tied).
struct TiedImpl : torch::nn::Module {
  TiedImpl() {
    torch::manual_seed(0);
    w = register_parameter("w", torch::randn({2, 3}));
    b = register_parameter("b", torch::randn({2}));
    register_parameter("frozen", torch::randn({4}), /*requires_grad=*/false);
    register_parameter("w_again", w);
  }
  torch::Tensor w, b;
};
TORCH_MODULE(Tied);

GroupLayout whole_layout(const TrainableParameters& params, int world) {
  std::vector<int64_t> numels;
  for (int64_t i = 0; i < params.size(); ++i) numels.push_back(params.numel(i));
  return cohort::detail::group_by_size(numels, 1 << 20, world).at(0);
}

}  // namespace

TEST(ZeroTrainableParameters, TiedOnceFrozenNever) {
  Tied model;
  TrainableParameters params(*model, {});
  EXPECT_THAT(params.names(), ElementsAre("w", "b"));
  ASSERT_EQ(params.tied().size(), 1u);
  EXPECT_EQ(params.tied()[0], std::make_pair(std::string("w_again"), std::string("w")));
  EXPECT_THAT(params.shape(0), ElementsAre(2, 3));
  EXPECT_EQ(params.total_numel(), 8);
}

TEST(ZeroTrainableParameters, WholeShapesOfShardedParameters) {
  torch::nn::Linear layer(4, 5);
  TrainableParameters::ShapeMap sharded{{layer->weight.unsafeGetTensorImpl(), {5, 4}}};
  layer->weight.set_data(torch::empty({0}));  // what a construction shard leaves
  TrainableParameters params(*layer, sharded);
  EXPECT_THAT(params.shape(0), ElementsAre(5, 4));
  EXPECT_EQ(params.numel(0), 20);
  params.show_whole_shapes(sharded);
  EXPECT_THAT(params.at(0).sizes(), ElementsAre(5, 4));
  EXPECT_EQ(params.at(0).storage().nbytes(), sizeof(float));  // one element behind the whole shape
}

TEST(ZeroTrainableParameters, FlattenAliasGatherAndFree) {
  torch::nn::Linear layer(3, 2);  // 6 + 2 elements, padded to 9 at a world of 3
  TrainableParameters params(*layer, {});
  const GroupLayout layout = whole_layout(params, 3);
  ASSERT_EQ(layout.padded, 9);
  const auto weight = params.at(0).clone(), bias = params.at(1).clone();
  torch::NoGradGuard no_grad;
  torch::Tensor flat = params.flatten(layout, torch::kFloat);
  EXPECT_TRUE(torch::equal(flat.narrow(0, 0, 6), weight.reshape(-1)));
  EXPECT_EQ(flat[8].item<float>(), 0.0f);  // padding
  params.alias_into(layout, flat);
  flat.fill_(7);
  EXPECT_TRUE(torch::equal(params.at(0), torch::full({2, 3}, 7.0)));  // the parameters live in the group

  params.free(layout);
  EXPECT_EQ(params.at(0).numel(), 0);
  EXPECT_THAT(params.shape(0), ElementsAre(2, 3));  // the whole shape is remembered
  torch::Tensor gathered = torch::zeros({9});
  gathered.narrow(0, 0, 6).copy_(weight.reshape(-1));
  gathered.narrow(0, 6, 2).copy_(bias);
  params.show_gathered(layout, gathered);
  EXPECT_TRUE(torch::equal(params.at(0), weight));
  EXPECT_TRUE(torch::equal(params.at(1), bias));
}

TEST(ZeroTrainableParameters, RefusesAModelWithNothingToTrain) {
  torch::nn::Linear frozen(2, 2);
  for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  EXPECT_THAT(cohort::testing::error_of([&] { TrainableParameters params(*frozen, {}); }),
              HasSubstr("the model has no parameter that requires grad"));
  try {
    TrainableParameters params(*frozen, {});
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument);
  }
}

}  // namespace zero_trainable_parameters_test
