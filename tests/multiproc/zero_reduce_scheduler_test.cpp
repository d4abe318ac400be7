// The ZeRO engine's reduce scheduler (src/zero/reduce_scheduler.h) fed gradients by hand on real
// ranks, without autograd or the engine: a complete group waits for every group after it (the note
// "launch order"), each rank ends with the mean of the ranks' gradients in its own shard (rank r sends
// r + 1, so the mean is (w + 1) / 2), only the shard outlives backward, and a second gradient of one
// parameter in one backward is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "cohort/error.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "zero/engine_settings.h"
#include "zero/reduce_scheduler.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"

namespace zero_reduce_scheduler_test {

using cohort::testing::run_ranks;
using ::testing::HasSubstr;
namespace detail = cohort::detail;

namespace {

// Two parameters, 5 and 3 elements: two groups at reduce_bucket_size 5, padded to the world size.
struct TwoGroups {
  TwoGroups()
      : settings(detail::make_engine_settings(
            cohort::ZeroConfig().zero_optimization(
                cohort::ZeroOptimizationConfig().stage(2).reduce_bucket_size(5).overlap_comm(true)),
            {})),
        model(make_model()),
        params(*model, {}),
        store(settings, params) {
    for (auto& layout : detail::group_by_size({5, 3}, 5, settings.world)) store.add_group(layout, torch::Tensor());
  }
  static std::shared_ptr<torch::nn::Module> make_model() {
    auto m = std::make_shared<torch::nn::Module>();
    m->register_parameter("a", torch::zeros({5}));
    m->register_parameter("b", torch::zeros({3}));
    return m;
  }
  detail::EngineSettings settings;
  std::shared_ptr<torch::nn::Module> model;
  detail::TrainableParameters params;
  detail::StateStore store;
};

// This rank's shard of group g holds `mean` on the group's real elements and 0 on its padding.
void expect_mean_in_shard(detail::StateStore& store, int64_t g, float mean, int rank) {
  const auto& layout = store.layout(g);
  const torch::Tensor& shard = store.gradients(g).shard_grad;
  for (int64_t i = 0; i < layout.shard; ++i) {
    const bool real = rank * layout.shard + i < layout.numel;
    EXPECT_FLOAT_EQ(shard[i].item<float>(), real ? mean : 0.0f) << "group " << g << " element " << i;
  }
}

void body(int rank, int size) {
  cohort::init();
  TwoGroups t;
  detail::ReduceScheduler scheduler(t.settings, t.params, t.store);
  EXPECT_EQ(scheduler.gradient_ready(0), -1) << "outside a backward nothing is reduced";

  scheduler.begin_backward();
  t.params.at(0).mutable_grad() = torch::full({5}, float(rank + 1));
  EXPECT_EQ(scheduler.gradient_ready(0), 0) << "group 0 is complete";
  scheduler.launch_ready();
  EXPECT_FALSE(scheduler.launched_in_backward(0)) << "the last group launches first";
  t.params.at(1).mutable_grad() = torch::full({3}, 10.0f * float(rank + 1));
  EXPECT_EQ(scheduler.gradient_ready(1), 1);
  scheduler.launch_ready();
  EXPECT_TRUE(scheduler.launched_in_backward(1));
  EXPECT_TRUE(scheduler.launched_in_backward(0));
  scheduler.finish();
  scheduler.end_backward();
  EXPECT_FALSE(scheduler.launched_in_backward(0)) << "only inside its backward";

  const float mean = float(size + 1) / 2;
  expect_mean_in_shard(t.store, 0, mean, rank);
  expect_mean_in_shard(t.store, 1, 10 * mean, rank);
  EXPECT_FALSE(t.params.at(0).grad().defined()) << "only the shard outlives backward";
  cohort::MemoryReport report;
  scheduler.add_memory(report);
  EXPECT_EQ(report.buffer_bytes, 0) << "every staging buffer returned";

  scheduler.begin_backward();
  t.params.at(0).mutable_grad() = torch::ones({5});
  EXPECT_EQ(scheduler.gradient_ready(0), 0);
  EXPECT_THAT(cohort::testing::error_of([&] { scheduler.gradient_ready(0); }),
              HasSubstr("parameter 'a' got two gradients in one backward pass"));
  scheduler.end_backward();
}

}  // namespace

TEST(ZeroReduceScheduler, LaunchesLastGroupFirstAndAveragesIntoShardsOnTwoRanks) { run_ranks(2, body); }
TEST(ZeroReduceScheduler, LaunchesLastGroupFirstAndAveragesIntoShardsOnThreeRanks) { run_ranks(3, body); }

}  // namespace zero_reduce_scheduler_test
