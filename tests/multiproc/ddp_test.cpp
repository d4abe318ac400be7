// DistributedDataParallel on real rank processes. Each rank also trains a local reference model (same
// initial weights) on the whole global batch, so equivalence is checked on every rank: N ranks x batch
// B must give the parameters of 1 process x batch N*B (BatchNorm: the reference runs the N chunks
// separately, as the ranks do, and keeps chunk 0's running statistics, which DDP broadcasts).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/ddp.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace ddp_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

using cohort::testing::Cnn;
using cohort::testing::CnnImpl;
using cohort::testing::Mlp;

// A layer that is only used when `use_extra` is set.
struct PartlyUsedImpl : torch::nn::Module {
  PartlyUsedImpl() {
    used = register_module("used", torch::nn::Linear(20, 5));
    unused = register_module("unused", torch::nn::Linear(20, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return use_extra ? used(x) + unused(x) : used(x); }
  torch::nn::Linear used{nullptr}, unused{nullptr};
  bool use_extra = false;
};
TORCH_MODULE(PartlyUsed);

constexpr int kSteps = 20, kBatch = 8;

torch::Tensor inputs_for(const torch::nn::Module& m, int64_t n) {
  return dynamic_cast<const CnnImpl*>(&m) ? torch::randn({n, 1, 8, 8}) : torch::randn({n, 20});
}

double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  auto ba = a.buffers(), bb = b.buffers();
  for (size_t i = 0; i < ba.size(); ++i)
    worst = std::max(worst, (ba[i].to(torch::kDouble) - bb[i].to(torch::kDouble)).abs().max().item<double>());
  return worst;
}

template <typename Holder>
void train_equivalence(int rank, int size) {
  cohort::init();
  torch::manual_seed(1);
  Holder model;
  torch::manual_seed(1);
  Holder reference;
  cohort::DistributedDataParallel ddp(model);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::manual_seed(100);  // the data: the same global batches on every rank
  for (int step = 0; step < kSteps; ++step) {
    auto x = inputs_for(*model, int64_t(size) * kBatch);
    auto y = torch::randint(0, 5, {int64_t(size) * kBatch}, torch::kLong);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(ddp->forward(x.narrow(0, rank * kBatch, kBatch)),
                                                     y.narrow(0, rank * kBatch, kBatch));
    loss.backward();
    opt.step();
    ref_opt.zero_grad();
    std::vector<torch::Tensor> after_chunk0;
    for (int k = 0; k < size; ++k) {
      auto out = reference->forward(x.narrow(0, k * kBatch, kBatch));
      if (k == 0)
        for (auto& b : reference->buffers()) after_chunk0.push_back(b.clone());
      (torch::nn::functional::cross_entropy(out, y.narrow(0, k * kBatch, kBatch)) / size).backward();
    }
    torch::NoGradGuard no_grad;
    auto buffers = reference->buffers();
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(after_chunk0[i]);
    ref_opt.step();
  }
  const double diff = max_difference(*model, *reference);
  EXPECT_LT(diff, 1e-5) << "after " << kSteps << " steps on " << size << " ranks";
  report("diff=" + std::to_string(diff));
}

}  // namespace

class DdpEquivalence : public ::testing::TestWithParam<int> {};
TEST_P(DdpEquivalence, MlpMatchesOneProcessWithTheGlobalBatch) { run_ranks(GetParam(), train_equivalence<Mlp>); }
TEST_P(DdpEquivalence, CnnWithBatchNormMatchesOneProcess) { run_ranks(GetParam(), train_equivalence<Cnn>); }
INSTANTIATE_TEST_SUITE_P(Ranks, DdpEquivalence, ::testing::Values(2, 3));

TEST(Ddp, BroadcastsRankZerosParametersAtConstruction) {
  auto results = run_ranks(2, [](int rank, int) {
    cohort::init();
    torch::manual_seed(rank + 10);  // different initial weights per rank
    Mlp model;
    cohort::DistributedDataParallel ddp(model);
    torch::manual_seed(10);
    Mlp rank0;
    EXPECT_EQ(max_difference(*model, *rank0), 0.0);
  });
}

TEST(Ddp, NoSyncOverMicroBatchesEqualsOneLargerBatch) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    torch::manual_seed(3);
    Mlp a;
    torch::manual_seed(3);
    Mlp b;
    cohort::DistributedDataParallel ddp_a(a), ddp_b(b);
    torch::manual_seed(7 + rank);
    const int k = 4;
    auto x = torch::randn({k * kBatch, 20});
    auto y = torch::randint(0, 5, {k * kBatch}, torch::kLong);
    for (int m = 0; m < k; ++m) {
      auto loss = torch::nn::functional::cross_entropy(ddp_a(x.narrow(0, m * kBatch, kBatch)),
                                                       y.narrow(0, m * kBatch, kBatch)) / k;
      if (m + 1 < k) {
        auto guard = ddp_a.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    torch::nn::functional::cross_entropy(ddp_b(x), y).backward();
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_LT((pa[i].grad() - pb[i].grad()).abs().max().item<double>(), 1e-6) << "parameter " << i;
  });
}

TEST(Ddp, UnusedParameterWithoutOptionRaisesNamingIt) {
  auto results = run_ranks(2, [](int, int) {
    cohort::init();
    PartlyUsed model;
    cohort::DistributedDataParallel ddp(model);
    try {
      torch::nn::functional::cross_entropy(ddp(torch::randn({4, 20})), torch::zeros({4}, torch::kLong)).backward();
      ADD_FAILURE() << "expected an error";
    } catch (const cohort::Error& e) {
      report(std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
      report(cohort::error_kind_name(e.kind()));  // a usage error: retrying cannot help
    }
  });
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 2u) << r.output;
    EXPECT_EQ(r.reports[1], "invalid argument");
    EXPECT_THAT(r.reports[0], HasSubstr("parameters 'unused.weight', 'unused.bias' received no gradient"));
    EXPECT_THAT(r.reports[0], HasSubstr("find_unused_parameters(true)"));
  }
}

TEST(Ddp, FindUnusedParametersTrainsAndMatchesTheReference) {
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    torch::manual_seed(5);
    PartlyUsed model;
    torch::manual_seed(5);
    PartlyUsed reference;
    cohort::DistributedDataParallel ddp(model, cohort::DDPOptions().find_unused_parameters(true));
    torch::optim::SGD opt(model->parameters(), 0.1), ref_opt(reference->parameters(), 0.1);
    torch::manual_seed(50);
    for (int step = 0; step < 6; ++step) {
      // The extra layer is used on rank 1 only, every other step: its gradient is averaged with zeros.
      model->use_extra = rank == 1 && step % 2 == 0;
      auto x = torch::randn({size * kBatch, 20});
      auto y = torch::randint(0, 5, {size * kBatch}, torch::kLong);
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp(x.narrow(0, rank * kBatch, kBatch)),
                                           y.narrow(0, rank * kBatch, kBatch)).backward();
      opt.step();
      ref_opt.zero_grad();
      for (int k = 0; k < size; ++k) {
        reference->use_extra = k == 1 && step % 2 == 0;
        (torch::nn::functional::cross_entropy(reference(x.narrow(0, k * kBatch, kBatch)),
                                              y.narrow(0, k * kBatch, kBatch)) / size).backward();
      }
      for (auto& p : reference->parameters())
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      ref_opt.step();
    }
    EXPECT_LT(max_difference(*model, *reference), 1e-5);
  });
}

TEST(Ddp, FrozenParametersAreSkipped) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    torch::manual_seed(2);
    Mlp model;
    model->fc1->weight.set_requires_grad(false);
    auto frozen = model->fc1->weight.clone();
    cohort::DistributedDataParallel ddp(model);
    for (const auto& bucket : ddp.bucket_layout())
      for (const auto& name : bucket) EXPECT_NE(name, "fc1.weight");
    torch::optim::SGD opt(model->parameters(), 0.1);
    torch::manual_seed(rank);
    torch::nn::functional::cross_entropy(ddp(torch::randn({4, 20})), torch::zeros({4}, torch::kLong)).backward();
    opt.step();
    EXPECT_TRUE(torch::equal(model->fc1->weight, frozen));
  });
}

TEST(Ddp, BucketsAreRebuiltInArrivalOrderIdenticallyOnEveryRank) {
  auto results = run_ranks(3, [](int rank, int) {
    cohort::init();
    Mlp model;
    // Tiny buckets so there are several.
    cohort::DistributedDataParallel ddp(model, cohort::DDPOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.001));
    for (int step = 0; step < 2; ++step) {
      torch::manual_seed(rank + step);
      torch::nn::functional::cross_entropy(ddp(torch::randn({4, 20})), torch::zeros({4}, torch::kLong)).backward();
    }
    std::string layout;
    size_t count = 0;
    for (const auto& bucket : ddp.bucket_layout()) {
      layout += "|";
      for (const auto& name : bucket) layout += name + ",", ++count;
    }
    EXPECT_EQ(count, 6u);
    EXPECT_GT(ddp.bucket_layout().size(), 1u);
    report(layout);
  });
  for (const auto& r : results) {
    ASSERT_FALSE(r.reports.empty());
    EXPECT_EQ(r.reports[0], results[0].reports[0]);
  }
}

TEST(Ddp, DifferentModelsOnRanksAreReportedByParameterName) {
  auto results = run_ranks(2, [](int rank, int) {
    cohort::init();
    auto model = std::make_shared<torch::nn::Module>();
    model->register_module("fc", torch::nn::Linear(4, rank == 0 ? 6 : 5));
    try {
      cohort::DistributedDataParallel ddp(model);
      ADD_FAILURE() << "expected an error";
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  });
  for (const auto& r : results) {
    ASSERT_FALSE(r.reports.empty()) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("the first that differs is 'fc.weight' (parameter #0): "
                                        "rank 0: [6, 4] float32; rank 1: [5, 4] float32."));
  }
}

TEST(Ddp, LoneProcessTrainsLocally) {
  // No launcher: a world of one, DDP is the plain module.
  for (const char* v : {"RANK", "WORLD_SIZE"}) unsetenv(v);
  cohort::init();
  Mlp model;
  cohort::DistributedDataParallel ddp(model);
  auto loss = torch::nn::functional::cross_entropy(ddp(torch::randn({4, 20})), torch::zeros({4}, torch::kLong));
  loss.backward();
  EXPECT_TRUE(model->fc1->weight.grad().defined());
}

}  // namespace ddp_test
