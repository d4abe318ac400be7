// cohort::hvd (Horovod's API) on real rank processes: every operation's semantics with closed-form
// expectations (rank-valued tensors), DistributedOptimizer against cohort's DDP and against local
// gradient accumulation, fp16 compression, broadcast_optimizer_state, broadcast_object and
// allgather_object, the errors word for word and the stall warning; plus the pure pieces (fusion
// groups, unsupported variables, missing ranks) alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "cohort/ddp.h"
#include "cohort/horovod.h"
#include "compat/optimizer_state.h"
#include "horovod/gradient_reducer.h"
#include "horovod/settings.h"
#include "horovod/stall_inspector.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace horovod_test {

namespace hvd = cohort::hvd;
using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

// One value per rank, r + 1: sums and products have closed forms.
torch::Tensor rank_valued(int rank, std::vector<int64_t> shape = {3}) {
  return torch::full(shape, double(rank + 1));
}

void expect_equal(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6)) << what << ": got " << got << " want " << want;
}

void check_allreduce_ops(int rank, int n) {
  const double sum = n * (n + 1) / 2.0;
  double product = 1;
  for (int r = 1; r <= n; ++r) product *= r;
  const auto x = rank_valued(rank);
  expect_equal(hvd::allreduce(x), torch::full({3}, sum / n), "average (the default)");
  expect_equal(hvd::allreduce(x, "s", hvd::Sum), torch::full({3}, sum), "sum");
  expect_equal(hvd::allreduce(x, "min", hvd::Min), torch::full({3}, 1.0), "min");
  expect_equal(hvd::allreduce(x, "max", hvd::Max), torch::full({3}, double(n)), "max");
  expect_equal(hvd::allreduce(x, "prod", hvd::Product), torch::full({3}, product), "product");
  expect_equal(x, rank_valued(rank), "allreduce leaves its input alone");
  auto scaled = hvd::allreduce(x, hvd::AllreduceOptions().op(hvd::Sum).prescale_factor(2).postscale_factor(0.5));
  expect_equal(scaled, torch::full({3}, sum), "sum of 2x scaled by 0.5");
  auto avg_scaled = hvd::allreduce(x, hvd::AllreduceOptions().prescale_factor(3));
  expect_equal(avg_scaled, torch::full({3}, 3 * sum / n), "average of 3x");
  auto in_place = rank_valued(rank);
  hvd::allreduce_(in_place, hvd::AllreduceOptions().name("inplace").op(hvd::Sum));
  expect_equal(in_place, torch::full({3}, sum), "allreduce_ in place");
  auto ints = hvd::allreduce(torch::full({2}, rank + 1, torch::kLong), "ints", hvd::Sum);
  EXPECT_EQ(ints[1].item<int64_t>(), int64_t(sum));
  auto grouped = hvd::grouped_allreduce({x, rank_valued(rank, {2, 2}) * 10},
                                        hvd::AllreduceOptions().name("group").op(hvd::Sum));
  ASSERT_EQ(grouped.size(), 2u);
  expect_equal(grouped[0], torch::full({3}, sum), "grouped 0");
  expect_equal(grouped[1], torch::full({2, 2}, 10 * sum), "grouped 1");
}

void check_gather_broadcast_alltoall(int rank, int n) {
  // Rank r sends r + 1 rows of value r: the gather holds 1 + 2 + ... + n rows in rank order.
  auto gathered = hvd::allgather(torch::full({rank + 1, 2}, double(rank)), "ragged");
  ASSERT_EQ(gathered.size(0), n * (n + 1) / 2);
  for (int r = 0, row = 0; r < n; ++r)
    for (int k = 0; k <= r; ++k, ++row) EXPECT_EQ(gathered[row][1].item<double>(), r);
  auto from_last = hvd::broadcast(rank_valued(rank), n - 1, "b");
  expect_equal(from_last, torch::full({3}, double(n)), "broadcast from the last rank");
  // Rank r sends j + 1 rows of value 10 r + j to rank j: rank j receives n blocks of j + 1 rows.
  std::vector<int64_t> splits;
  std::vector<torch::Tensor> blocks;
  for (int j = 0; j < n; ++j) {
    splits.push_back(j + 1);
    blocks.push_back(torch::full({j + 1}, double(10 * rank + j)));
  }
  auto received = hvd::alltoall(torch::cat(blocks), splits, "a2a");
  ASSERT_EQ(received.size(0), n * (rank + 1));
  for (int r = 0; r < n; ++r) EXPECT_EQ(received[r * (rank + 1)].item<double>(), 10 * r + rank);
}

void check_async_any_order(int rank, int n) {
  const double sum = n * (n + 1) / 2.0;
  auto a = hvd::allreduce_async(rank_valued(rank), "async.a", hvd::Sum);
  auto g = hvd::allgather_async(torch::full({rank + 1}, double(rank)), "async.g");
  auto b = hvd::broadcast_async(rank_valued(rank), 0, "async.b");
  auto grouped = hvd::grouped_allreduce_async({rank_valued(rank)}, hvd::AllreduceOptions().name("async.group"));
  auto c = hvd::allreduce_async(rank_valued(rank) * 2, "async.c", hvd::Sum);
  // Waited for in another order than issued: last first.
  expect_equal(hvd::synchronize(c), torch::full({3}, 2 * sum), "c");
  expect_equal(hvd::synchronize_group(grouped)[0], torch::full({3}, sum / n), "grouped average");
  expect_equal(hvd::synchronize(b), torch::full({3}, 1.0), "b");
  EXPECT_EQ(hvd::synchronize(g).size(0), n * (n + 1) / 2);
  while (!hvd::poll(a)) std::this_thread::yield();
  expect_equal(hvd::synchronize(a), torch::full({3}, sum), "a");
  // cohort prefixes errors with the rank once there is more than one.
  const std::string me = n > 1 ? "[rank " + std::to_string(rank) + "/" + std::to_string(n) + "] " : "";
  EXPECT_EQ(error_of([&] { hvd::poll(a); }),
            me + "hvd::poll(" + std::to_string(a) +
                "): not an operation in flight (synchronized already, or not a handle an *_async call returned)");
}

}  // namespace

TEST(Hvd, OperationsOnOneTwoAndThreeRanks) {
  for (int n : {1, 2, 3}) {  // a world of one: every operation gives back its input's values
    run_ranks(n, [](int rank, int size) {
      hvd::init();
      ASSERT_TRUE(hvd::is_initialized());
      EXPECT_EQ(hvd::size(), size);
      EXPECT_EQ(hvd::rank(), rank);
      // One host: every rank is local, and each is alone with its local rank across nodes.
      EXPECT_EQ(hvd::local_size(), size);
      EXPECT_EQ(hvd::local_rank(), rank);
      EXPECT_EQ(hvd::cross_size(), 1);
      EXPECT_EQ(hvd::cross_rank(), 0);
      check_allreduce_ops(rank, size);
      check_gather_broadcast_alltoall(rank, size);
      check_async_any_order(rank, size);
      hvd::barrier();
      hvd::shutdown();
      EXPECT_FALSE(hvd::is_initialized());
    });
  }
}

TEST(Hvd, BroadcastAndAllgatherObjectsOfPickledValues) {
  run_ranks(3, [](int rank, int n) {
    hvd::init();
    const auto mine = c10::ivalue::Tuple::create(std::vector<c10::IValue>{
        int64_t(rank), "rank " + std::to_string(rank), torch::full({rank + 1}, double(rank))});
    const auto from_1 = hvd::broadcast_object(mine, 1, "obj").toTuple();
    EXPECT_EQ(from_1->elements()[0].toInt(), 1);
    EXPECT_EQ(from_1->elements()[1].toStringRef(), "rank 1");
    EXPECT_TRUE(torch::equal(from_1->elements()[2].toTensor(), torch::full({2}, 1.0)));
    const auto all = hvd::allgather_object(mine);  // unnamed: by order
    ASSERT_EQ(all.size(), size_t(n));
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(all[r].toTuple()->elements()[1].toStringRef(), "rank " + std::to_string(r));
      EXPECT_TRUE(torch::equal(all[r].toTuple()->elements()[2].toTensor(), torch::full({r + 1}, double(r))));
    }
    hvd::shutdown();
  });
}

TEST(Hvd, NotInitializedIsNamed) {
  EXPECT_EQ(error_of([] { hvd::rank(); }),
            "hvd::rank: cohort::hvd is not initialized; call cohort::hvd::init() first");
  try {
    hvd::rank();
    ADD_FAILURE() << "expected an error";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument);
  }
}

namespace {

using cohort::testing::Mlp;
constexpr int kSteps = 20, kBatch = 8;

double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

struct Batch {
  torch::Tensor x, y;
};

// The same global batches on every rank; rank r trains on its slice.
Batch global_batch(int size) {
  return {torch::randn({int64_t(size) * kBatch, 20}), torch::randint(0, 5, {int64_t(size) * kBatch}, torch::kLong)};
}

torch::Tensor loss_of(Mlp& model, const Batch& batch, int part) {
  return torch::nn::functional::cross_entropy(model->forward(batch.x.narrow(0, part * kBatch, kBatch)),
                                              batch.y.narrow(0, part * kBatch, kBatch));
}

// hvd's DistributedOptimizer and cohort's DDP from the same weights over the same batches; on odd
// steps both clip the reduced gradients (hvd: synchronize(), clip, step() under skip_synchronize()).
double distance_to_ddp(int rank, int size, hvd::Compression compression) {
  torch::manual_seed(1);
  Mlp ddp_model, hvd_model;
  for (size_t i = 0; i < hvd_model->parameters().size(); ++i)
    hvd_model->parameters()[i].detach().copy_(ddp_model->parameters()[i]);
  cohort::DistributedDataParallel ddp(ddp_model);
  torch::optim::SGD ddp_opt(ddp_model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::DistributedOptimizer opt(
      std::make_shared<torch::optim::SGD>(hvd_model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
      hvd_model->named_parameters(), hvd::DistributedOptimizer::Options().compression(compression));
  torch::manual_seed(100);
  for (int step = 0; step < kSteps; ++step) {
    const Batch batch = global_batch(size);
    ddp_opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(batch.x.narrow(0, rank * kBatch, kBatch)),
                                         batch.y.narrow(0, rank * kBatch, kBatch))
        .backward();
    if (step % 2) torch::nn::utils::clip_grad_norm_(ddp_model->parameters(), 0.5);
    ddp_opt.step();
    opt.zero_grad();
    loss_of(hvd_model, batch, rank).backward();
    if (step % 2) {
      opt.synchronize();
      torch::nn::utils::clip_grad_norm_(hvd_model->parameters(), 0.5);
      auto guard = opt.skip_synchronize();
      opt.step();
    } else {
      opt.step();
    }
  }
  return max_difference(*ddp_model, *hvd_model);
}

// backward_passes_per_step = k against one local model that sums the k micro-batches' gradients of
// every rank and averages over ranks.
double distance_to_accumulation(int rank, int size, int k) {
  torch::manual_seed(2);
  Mlp model, reference;
  for (size_t i = 0; i < model->parameters().size(); ++i)
    reference->parameters()[i].detach().copy_(model->parameters()[i]);
  hvd::DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(model->parameters(), 0.05),
                                model->named_parameters(), hvd::DistributedOptimizer::Options().backward_passes_per_step(k));
  torch::optim::SGD ref_opt(reference->parameters(), 0.05);
  torch::manual_seed(200);
  for (int step = 0; step < kSteps / k; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    for (int pass = 0; pass < k; ++pass) {
      const Batch batch = global_batch(size);
      loss_of(model, batch, rank).backward();
      for (int r = 0; r < size; ++r) (loss_of(reference, batch, r) / size).backward();
    }
    opt.step();
    ref_opt.step();
  }
  return max_difference(*model, *reference);
}

}  // namespace

// The tolerance of fp16 compression: float16 keeps 11 significant bits (relative error 2^-11 per
// gradient element); over 20 SGD steps the parameters drift from fp32 training by far less than 1e-3.
constexpr double kFp16Tolerance = 1e-3;

TEST(Hvd, DistributedOptimizerMatchesDdpAccumulatesAndCompresses) {
  cohort::testing::RanksOptions options;
  options.env["HOROVOD_FUSION_THRESHOLD"] = "4096";  // several fusion groups for the MLP
  for (int n : {2, 3}) {
    auto results = run_ranks(n, [](int rank, int size) {
      hvd::init();
      const double fp32 = distance_to_ddp(rank, size, hvd::Compression::none);
      EXPECT_LT(fp32, 1e-6) << "fp32 DistributedOptimizer against DDP";
      const double fp16 = distance_to_ddp(rank, size, hvd::Compression::fp16);
      EXPECT_LT(fp16, kFp16Tolerance) << "fp16 compression against fp32 DDP";
      EXPECT_GT(fp16, 0.0) << "fp16 compression changed nothing: are gradients really sent as float16?";
      EXPECT_LT(distance_to_accumulation(rank, size, 2), 1e-5) << "backward_passes_per_step=2";
      report("fp32=" + std::to_string(fp32) + " fp16=" + std::to_string(fp16));
    }, options);
    for (const auto& r : results) std::cout << "rank " << r.rank << "/" << n << ": " << (r.reports.empty() ? "" : r.reports[0]) << "\n";
  }
}

namespace {

// Adam's state of every parameter (moments and step) and the lr, flattened: equal on every rank
// after broadcast_optimizer_state.
torch::Tensor adam_digest(torch::optim::Adam& adam) {
  std::vector<torch::Tensor> parts{torch::tensor({adam.param_groups()[0].options().get_lr()}, torch::kDouble)};
  for (const auto& p : adam.param_groups()[0].params()) {
    auto* found = cohort::detail::find_param_state(adam, p);
    if (found == nullptr) {
      parts.push_back(torch::tensor({-1.0}, torch::kDouble));
      continue;
    }
    auto& state = static_cast<torch::optim::AdamParamState&>(*found);
    parts.push_back(torch::tensor({double(state.step())}, torch::kDouble));
    parts.push_back(state.exp_avg().reshape(-1).to(torch::kDouble));
    parts.push_back(state.exp_avg_sq().reshape(-1).to(torch::kDouble));
  }
  return torch::cat(parts);
}

}  // namespace

TEST(Hvd, BroadcastOptimizerStateRestoresAdamOnARankThatStartedDifferent) {
  run_ranks(2, [](int rank, int) {
    hvd::init();
    torch::manual_seed(10 + rank);  // different weights on every rank
    Mlp model;
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(rank == 0 ? 1e-3 : 5e-2));
    // Rank 0 has trained 3 steps (a state with step 3); rank 1 has never stepped (no state at all).
    for (int step = 0; step < 3 * (rank == 0); ++step) {
      adam.zero_grad();
      model->forward(torch::randn({4, 20})).sum().backward();
      adam.step();
    }
    hvd::broadcast_parameters(model->named_parameters(), 0);
    hvd::broadcast_optimizer_state(adam, 0);
    const auto digest = adam_digest(adam);
    auto all = hvd::allgather(digest.unsqueeze(0), "digest");
    EXPECT_TRUE(torch::equal(all[0], all[1])) << "the optimizer states differ after the broadcast";
    EXPECT_EQ(digest[0].item<double>(), 1e-3) << "root's learning rate";
    EXPECT_EQ(digest[1].item<double>(), 3) << "root's step count";
    // One more step on the same gradient everywhere: the same parameters (bias correction uses step 4).
    torch::manual_seed(7);
    adam.zero_grad();
    model->forward(torch::randn({4, 20})).sum().backward();
    adam.step();
    std::vector<torch::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape(-1));
    auto params = hvd::allgather(torch::cat(flat).unsqueeze(0), "params");
    EXPECT_TRUE(torch::equal(params[0], params[1])) << "parameters differ after a step from the broadcast state";
  });
}

TEST(Hvd, ErrorsNameTheTensorAndEachRanksCall) {
  run_ranks(2, [](int rank, int) {
    hvd::init();
    const std::string me = "[rank " + std::to_string(rank) + "/2] ";
    auto first = hvd::allreduce_async(torch::ones({2}), "dup");
    EXPECT_EQ(error_of([] { hvd::allreduce_async(torch::ones({2}), "dup"); }),
              me + "hvd::allreduce_async('dup'): a tensor named 'dup' is still in flight (handle 0, not yet "
                   "synchronized); a name may be used by one operation at a time: synchronize the first one or "
                   "use another name");
    hvd::synchronize(first);

    Mlp model;
    hvd::DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(model->parameters(), 0.1),
                                  model->named_parameters());
    model->forward(torch::ones({2, 20})).sum().backward();
    std::string message;
    try {
      model->forward(torch::ones({2, 20})).sum().backward();  // a second pass before step()
    } catch (const std::exception& e) {
      message = e.what();
    }
    EXPECT_THAT(message, HasSubstr(me + "hvd::DistributedOptimizer: parameter 'fc3."));
    EXPECT_THAT(message, HasSubstr("' got a gradient in 2 backward passes before step(), but "
                                   "backward_passes_per_step is 1: call step() (or synchronize()) after each "
                                   "backward_passes_per_step backward passes, or raise it to accumulate more "
                                   "passes locally"));
    opt.synchronize();
    model->forward(torch::ones({2, 20})).sum().backward();
    EXPECT_EQ(error_of([&] { opt.zero_grad(); }),
              me + "hvd::DistributedOptimizer: zero_grad() was called after backward() started reducing gradients "
                   "but before step() or synchronize(); the reductions in flight would write into the zeroed "
                   "gradients. Call step() or synchronize() first");
    opt.step();
    // Shapes that differ between ranks: horovod_negotiation_test.cpp (ANameWithOtherShapes...).
  });
}

TEST(Hvd, StallWarningNamesTheMissingRanksAndTensorsAndUnsupportedVariablesAreNamed) {
  cohort::testing::RanksOptions options;
  options.env["HOROVOD_STALL_CHECK_TIME_SECONDS"] = "1";
  options.env["HOROVOD_AUTOTUNE"] = "1";
  options.env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1";
  auto results = run_ranks(2, [](int rank, int) {
    hvd::init();
    hvd::allreduce(torch::ones({1}), "early");
    if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(4));  // rank 0 waits in 'late'
    hvd::allreduce(torch::ones({1}), "late");
  }, options);
  for (const auto& r : results) {
    EXPECT_THAT(r.output, HasSubstr("[cohort] [rank " + std::to_string(r.rank) + "/2] warning: cohort::hvd ignores "
                                    "HOROVOD_AUTOTUNE, HOROVOD_HIERARCHICAL_ALLREDUCE: not supported (cohort::hvd "
                                    "honours HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, HOROVOD_CACHE_CAPACITY, "
                                    "HOROVOD_TIMELINE, HOROVOD_STALL_CHECK_TIME_SECONDS and "
                                    "HOROVOD_STALL_CHECK_DISABLE; see docs/horovod.md)\n"));
  }
  EXPECT_THAT(results[0].output, HasSubstr("[cohort] [rank 0/2] warning: hvd stall: tensors submitted by a subset of "
                                           "ranks have waited more than 1 s for the others "
                                           "(HOROVOD_STALL_CHECK_TIME_SECONDS). Missing ranks: 1: [late]. Ranks that "
                                           "submit different tensors, or only some ranks submitting, deadlock; "
                                           "cohort's timeout (300 s, COHORT_TIMEOUT) ends the wait with an error.\n"));
  EXPECT_THAT(results[1].output, ::testing::Not(HasSubstr("hvd stall")));
}

TEST(HvdPieces, FusionGroupsAreConsecutiveRunsOfOneKindUpToTheThreshold) {
  using hvd::detail::fusion_groups;
  using Groups = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(fusion_groups({100, 100, 100, 50}, {0, 0, 1, 1}, 200), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(fusion_groups({100, 100, 100}, {0, 0, 0}, 250), (Groups{{0, 1}, {2}}));
  EXPECT_EQ(fusion_groups({300, 10, 10}, {0, 0, 0}, 200), (Groups{{0}, {1, 2}}));
  EXPECT_EQ(fusion_groups({10, 10}, {0, 0}, 0), (Groups{{0}, {1}}));
}

TEST(HvdPieces, UnsupportedVariablesAreTheOtherHorovodOnes) {
  EXPECT_EQ(hvd::detail::unsupported_variables({"HOROVOD_FUSION_THRESHOLD=1", "HOROVOD_TIMELINE=t.json", "PATH=/bin",
                                                "HOROVOD_AUTOTUNE=1", "HOROVOD_CYCLE_TIME=2", "MY_HOROVOD_X=1"}),
            (std::vector<std::string>{"HOROVOD_AUTOTUNE"}));
}

TEST(HvdPieces, MissingRanksAreThoseShortOfTheStalledOperation) {
  using hvd::detail::missing_ranks;
  const std::map<int64_t, std::string> waiting{{1, "b"}, {2, "c"}};
  auto missing = missing_ranks({3, 1, -1, 2}, 0, waiting, 1);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].rank, 1);
  EXPECT_EQ(missing[0].names, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(missing[1].rank, 2);  // never posted: counts as none submitted
  EXPECT_EQ(missing[1].names, (std::vector<std::string>{"b", "c"}));
  EXPECT_TRUE(missing_ranks({3, 2, 3}, 0, waiting, 1).empty());
  EXPECT_EQ(hvd::detail::stall_warning(missing, {0, 4, 2.5, std::chrono::milliseconds(30000)}),
            "hvd stall: tensors submitted by a subset of ranks have waited more than 2.5 s for the others "
            "(HOROVOD_STALL_CHECK_TIME_SECONDS). Missing ranks: 1: [b, c]; 2: [b, c]. Ranks that submit different "
            "tensors, or only some ranks submitting, deadlock; cohort's timeout (30 s, COHORT_TIMEOUT) ends the "
            "wait with an error.");
}

}  // namespace horovod_test
