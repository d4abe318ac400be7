// hvd::join (Horovod's hvd.join) on 3 ranks: ranks that run out of steps early take part in the
// others' DistributedOptimizer and allreduce operations with zeros until every rank joined; the weights
// equal a reference trained by Horovod's rule (each step the gradients of the ranks that still had
// data, summed, divided by all 3 ranks); join() returns the last rank to join on every rank; operations
// a joined rank cannot take part in fail naming it; afterwards the ranks go on alike.
#include <algorithm>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/horovod.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace horovod_join_test {

namespace hvd = cohort::hvd;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

constexpr double kLr = 0.1;

// Rank r's batch at step s: the same on every run, different for every (r, s).
std::pair<torch::Tensor, torch::Tensor> batch(int rank, int step) {
  const auto x = torch::arange(8, torch::kDouble).reshape({2, 4}).mul(0.1 * (rank + 1)).add(0.05 * step).sin();
  const auto y = torch::arange(2, torch::kDouble).reshape({2, 1}).add(rank - step * 0.5).cos();
  return {x, y};
}

torch::nn::Linear make_model() {
  torch::manual_seed(7);
  torch::nn::Linear model(4, 1);
  model->to(torch::kDouble);
  return model;
}

torch::Tensor loss_of(torch::nn::Linear& model, int rank, int step) {
  const auto [x, y] = batch(rank, step);
  return torch::mse_loss(model->forward(x), y);
}

// Horovod's rule in one process: each step the gradient sum of the ranks with data left, over all ranks.
torch::nn::Linear reference(const std::vector<int>& steps) {
  auto model = make_model();
  torch::optim::SGD opt(model->parameters(), kLr);
  const int n = int(steps.size()), most = *std::max_element(steps.begin(), steps.end());
  for (int s = 0; s < most; ++s) {
    opt.zero_grad();
    for (int r = 0; r < n; ++r)
      if (s < steps[r]) (loss_of(model, r, s) / n).backward();
    opt.step();
  }
  return model;
}

int active_at(const std::vector<int>& steps, int step) {
  return int(std::count_if(steps.begin(), steps.end(), [&](int k) { return k > step; }));
}

// Rank `rank` trains steps[rank] steps with DistributedOptimizer (and an unnamed allreduce per step
// counting the ranks with data), joins, takes the last rank's weights and compares them.
void train_and_join(const std::vector<int>& steps, int expected_last, int rank) {
  hvd::init();
  auto model = make_model();
  hvd::DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(model->parameters(), kLr),
                                model->named_parameters());
  for (int s = 0; s < steps[rank]; ++s) {
    opt.zero_grad();
    loss_of(model, rank, s).backward();
    opt.step();
    const auto active = hvd::allreduce(torch::ones({1}), "", hvd::Sum);  // a joined rank adds 0
    EXPECT_EQ(active.item<float>(), active_at(steps, s)) << "step " << s;
  }
  const int last = hvd::join();
  EXPECT_EQ(last, expected_last);
  hvd::broadcast_parameters(model->named_parameters(), last);  // the joined ranks' weights are stale
  const auto want = reference(steps);
  for (size_t i = 0; i < want->parameters().size(); ++i)
    EXPECT_TRUE(torch::allclose(model->parameters()[i], want->parameters()[i], 1e-12, 1e-12))
        << "parameter " << i << ": " << model->parameters()[i] << " want " << want->parameters()[i];
  // After the join every rank goes on alike: unnamed operations keep matching.
  EXPECT_EQ(hvd::allreduce(torch::full({1}, double(rank)), "", hvd::Sum).item<double>(), 3.0);
  hvd::shutdown();
}

}  // namespace

TEST(HvdJoin, OneRankWithOneStepFewer) {
  run_ranks(3, [](int rank, int) { train_and_join({5, 5, 4}, 1, rank); });
}

// Rank 0 has 7 steps fewer than rank 1, rank 2 has 5 fewer: they join at different steps.
TEST(HvdJoin, RanksWithManyStepsFewerJoiningAtDifferentSteps) {
  run_ranks(3, [](int rank, int) { train_and_join({1, 8, 3}, 1, rank); });
}

// While rank 2 has joined, a broadcast and a Min allreduce fail on the ranks that submit them, naming
// rank 2 (Horovod's join shadows Sum and Average allreduces only); then ranks 0 and 1 join together;
// then all three join again.
TEST(HvdJoin, OperationsAJoinedRankCannotShadowFail) {
  run_ranks(3, [](int rank, int) {
    hvd::init();
    const std::string me = "[rank " + std::to_string(rank) + "/3] ";
    if (rank < 2) {
      EXPECT_EQ(error_of([] { hvd::broadcast(torch::ones({2}), 0, "b"); }),
                me + "hvd::broadcast('b'): rank 2 called hvd::join(); a joined rank takes part in Sum and Average "
                     "allreduces only (as in Horovod), not in this broadcast; synchronize it before any rank calls "
                     "hvd::join()");
      EXPECT_EQ(error_of([] { hvd::allreduce(torch::ones({2}), "m", hvd::Min); }),
                me + "hvd::allreduce('m'): rank 2 called hvd::join(); a joined rank takes part in Sum and Average "
                     "allreduces only (as in Horovod), not in this allreduce(min); synchronize it before any rank "
                     "calls hvd::join()");
      const auto average = hvd::allreduce(torch::ones({2}), "s", hvd::Average);  // over all 3 ranks, as Horovod
      EXPECT_TRUE(torch::allclose(average, torch::full({2}, 2.0f / 3))) << average;
    }
    EXPECT_EQ(hvd::join(), 1);  // ranks 0 and 1 join in the same round: the higher is the last
    EXPECT_EQ(hvd::allreduce(torch::full({1}, double(rank)), "after", hvd::Sum).item<double>(), 3.0);
    EXPECT_EQ(hvd::join(), 2);  // and again: all three in one round
    hvd::shutdown();
  });
}

}  // namespace horovod_join_test
