// The pipeline runtime on real rank processes: trained with GPipe, 1F1B and interleaved 1F1B over 2, 3
// and 4 ranks (uneven partitions, chunks that do not divide the batch, a smaller last batch,
// recomputation, SGD with momentum and Adam), the stages' parameters and the loss equal one process
// training the whole model on the whole batch; likewise on a 2 x 2 pipeline x DDP mesh. The runtime's
// count of activations held shows 1F1B's bound; a stage that raises, a stage given the wrong shape and a
// rank that dies make every rank raise naming it. Partitioning is tested alone, without processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "cohort/mesh.h"
#include "cohort/pipeline.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace pipeline_test {

using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::report;
using cohort::testing::run_ranks;
namespace pp = cohort::pipeline;

namespace {

constexpr int kSteps = 5;
constexpr int kBatch = 10;  // 4 chunks of 3, 3, 2, 2 rows

// A deep MLP without BatchNorm (microbatches would change its statistics): 11 layers, 8 -> 4.
torch::nn::Sequential deep_mlp() {
  torch::manual_seed(7);
  torch::nn::Sequential net;
  net->push_back(torch::nn::Linear(8, 16));
  for (int i = 0; i < 4; ++i) {
    net->push_back(torch::nn::Tanh());
    net->push_back(torch::nn::Linear(16, i == 1 ? 24 : 16));
    if (i == 1) net->push_back(torch::nn::Linear(24, 16));
  }
  net->push_back(torch::nn::Linear(16, 4));
  return net;
}

// Step i's batch, the same on every rank; the last step's batch is smaller.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rows) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  return {torch::randn({rows, 8}, gen), torch::randint(0, 4, {rows}, gen)};
}

torch::Tensor loss_fn(const torch::Tensor& out, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(out, y);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, std::vector<torch::Tensor> params) {
  if (kind == "sgd") return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
}

struct Case {
  Case(std::string schedule_, int stages_per_rank_, std::string optimizer_, pp::PartitionOptions partition_ = {},
       int chunks_ = 4, bool recompute_ = false)
      : schedule(std::move(schedule_)), stages_per_rank(stages_per_rank_), optimizer(std::move(optimizer_)),
        partition(std::move(partition_)), chunks(chunks_), recompute(recompute_) {}
  std::string schedule;
  int stages_per_rank;
  std::string optimizer;
  pp::PartitionOptions partition;
  int chunks;
  bool recompute;
  std::shared_ptr<cohort::Comm> data;  // pipeline x data parallel: this replica's group
};

// Trains the pipeline and the whole model in this process side by side; the loss of each step and the
// stages' parameters must agree. Returns the largest activation count of a step.
int expect_equivalent(const std::shared_ptr<cohort::Comm>& pipe, const Case& c) {
  auto model = deep_mlp(), reference = deep_mlp();
  const int ranks = pipe->size(), rank = pipe->rank();
  auto part = pp::partition(model, ranks * c.stages_per_rank, c.partition);
  pp::Pipeline pipeline(pipe, pp::stages_of_rank(part, ranks, rank),
                        pp::PipelineOptions().schedule(c.schedule).stages_per_rank(c.stages_per_rank).chunks(c.chunks)
                            .loss_fn(loss_fn).recompute(c.recompute).data_comm(c.data));
  auto opt = make_optimizer(c.optimizer, pipeline.parameters());
  auto ref_opt = make_optimizer(c.optimizer, reference->parameters());
  const int replicas = c.data ? c.data->size() : 1, replica = c.data ? c.data->rank() : 0;
  int peak = 0;
  for (int step = 0; step < kSteps; ++step) {
    const int rows = step == kSteps - 1 ? 7 : kBatch;
    auto [x, y] = batch(step, rows * replicas);
    auto mine = torch::indexing::Slice(replica * rows, (replica + 1) * rows);
    opt->zero_grad();
    double loss = pipeline.step(x.index({mine}), y.index({mine})).item<double>();
    opt->step();
    peak = std::max(peak, pipeline.peak_activations());
    ref_opt->zero_grad();
    auto ref_loss = loss_fn(reference->forward(x), y);
    ref_loss.backward();
    ref_opt->step();
    if (!c.data) {
      EXPECT_NEAR(loss, ref_loss.item<double>(), 1e-5) << c.schedule << " step " << step;
    }
  }
  auto expected = reference->named_parameters();
  for (const auto& stage : pipeline.stages())
    for (const auto& p : stage->named_parameters()) {
      const double diff = (p.value() - expected[p.key()]).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5) << c.schedule << "/" << c.optimizer << " rank " << rank << " parameter " << p.key();
    }
  return peak;
}

cohort::testing::RanksOptions with_timeout(int seconds) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = std::to_string(seconds);
  options.deadline = std::chrono::seconds(120);
  return options;
}

}  // namespace

TEST(PipelinePartition, UniformParametersAndExplicitBoundaries) {
  EXPECT_EQ(pp::partition_boundaries({1, 1, 1, 1, 1}, 2, "uniform"), (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(pp::partition_boundaries({10, 0, 10, 0, 40}, 2, "parameters"), (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(pp::partition_boundaries({5, 5, 5, 5}, 4, "parameters"), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Flatten, Linear, ReLU, ...: among cuts of equal largest stage, the most even layer counts (no stage
  // of a lone parameterless Flatten, whose output would carry no gradient).
  auto mlp = pp::partition_boundaries({0, 200, 0, 65, 0, 65, 0, 65, 0, 3}, 4, "parameters");
  EXPECT_GE(mlp[1], 2);
  for (int s = 0; s < 4; ++s) EXPECT_LE(mlp[s + 1] - mlp[s], 3) << "stage " << s;
  EXPECT_THAT(error_of([] { pp::partition_boundaries({1, 1}, 3, "uniform"); }),
              HasSubstr("3 stages for a model of 2 layers (each stage needs at least one layer: 1 to 2 stages)"));
  EXPECT_THAT(error_of([] { pp::partition_boundaries({1, 1}, 2, "type:Linear"); }),
              HasSubstr("method 'type:Linear' is not one of: uniform, parameters"));
  auto model = deep_mlp();
  auto part = pp::partition(model, 3, pp::PartitionOptions().boundaries({0, 1, 8, 11}));
  EXPECT_EQ(part.stages[1]->size(), 7u);
  EXPECT_EQ(part.parameters[0], 8 * 16 + 16);
  EXPECT_THAT(part.describe(), HasSubstr("stage 0: layers 0-0 (Linear), 144 parameters"));
  // The stages share the model's layers and names.
  EXPECT_TRUE(part.stages[2]->named_parameters().contains("10.weight"));
  EXPECT_THAT(error_of([&] { pp::partition(model, 2, pp::PartitionOptions().boundaries({0, 5, 5})); }),
              HasSubstr("boundaries {0, 5, 5} must be 3 layer indices from 0 to 11"));
  EXPECT_THAT(error_of([&] { pp::partition(model, 2, pp::PartitionOptions().boundaries({0, 0, 11})); }),
              HasSubstr("leave stage 0 without a layer"));
}

TEST(PipelineEquivalence, OneRankWithLoopedStages) {
  auto world = cohort::init();  // a lone process: a world of one, stages hand over without transfers
  expect_equivalent(world.comm_ptr(), {"interleaved", 3, "adam"});
  expect_equivalent(world.comm_ptr(), {"gpipe", 1, "sgd"});
}

TEST(PipelineEquivalence, TwoStagesEverySchedule) {
  run_ranks(2, [](int rank, int) {
    auto world = cohort::init();
    // Each schedule meets both optimizers over this test and the 3- and 4-stage ones.
    const int gpipe = expect_equivalent(world.comm_ptr(), {"gpipe", 1, "sgd"});
    const int one_f_one_b = expect_equivalent(world.comm_ptr(), {"1f1b", 1, "sgd"});
    expect_equivalent(world.comm_ptr(), {"interleaved", 2, "adam"});
    // GPipe holds every microbatch; 1F1B (stages - stage index).
    EXPECT_EQ(gpipe, 4);
    EXPECT_EQ(one_f_one_b, 2 - rank);
  }, with_timeout(60));
}

TEST(PipelineEquivalence, ThreeStagesUnevenPartitionAndRecompute) {
  run_ranks(3, [](int, int) {
    auto world = cohort::init();
    auto uneven = pp::PartitionOptions().boundaries({0, 1, 9, 11});
    expect_equivalent(world.comm_ptr(), {"1f1b", 1, "sgd", uneven, 5});
    expect_equivalent(world.comm_ptr(), {"gpipe", 1, "adam", uneven, 3});
    expect_equivalent(world.comm_ptr(), {"1f1b", 1, "adam", pp::PartitionOptions().method("uniform"), 4, true});
  }, with_timeout(60));
}

TEST(PipelineEquivalence, FourStagesAndActivationCounts) {
  run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    const int gpipe = expect_equivalent(world.comm_ptr(), {"gpipe", 1, "sgd", {}, 6});
    const int one_f_one_b = expect_equivalent(world.comm_ptr(), {"1f1b", 1, "adam", {}, 6});
    expect_equivalent(world.comm_ptr(), {"interleaved", 2, "sgd", pp::PartitionOptions().method("uniform"), 4});
    EXPECT_EQ(gpipe, 6);
    EXPECT_EQ(one_f_one_b, 4 - rank);  // PipeDream-flush: warm-up of (stages - index - 1), then one more
    report("peak 1f1b=" + std::to_string(one_f_one_b) + " gpipe=" + std::to_string(gpipe));
  }, with_timeout(60));
}

TEST(PipelineEquivalence, TwoByTwoPipelineTimesDdp) {
  run_ranks(4, [](int, int) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"pipe", 2}, {"data", 2}});
    for (std::string optimizer : {"sgd", "adam"}) {
      Case c{"1f1b", 1, optimizer};
      c.data = mesh.group_ptr("data");
      expect_equivalent(mesh.group_ptr("pipe"), c);
    }
  }, with_timeout(60));
}

TEST(PipelineFailures, StageThatRaisesIsNamedOnEveryRank) {
  auto options = with_timeout(60);
  options.expect_all_pass = true;
  auto results = run_ranks(3, [](int rank, int) {
    auto world = cohort::init();
    auto part = pp::partition(deep_mlp(), 3, pp::PartitionOptions().method("uniform"));
    auto stages = pp::stages_of_rank(part, 3, rank);
    int calls = 0;
    if (rank == 1)  // stage 1 raises on the second step's third microbatch
      stages[0]->push_back("raises", torch::nn::Functional([&calls](torch::Tensor x) {
        if (++calls == 7) throw std::runtime_error("boom in layer");
        return x;
      }));
    pp::Pipeline pipeline(world.comm_ptr(), stages, pp::PipelineOptions().schedule("1f1b").loss_fn(loss_fn));
    const auto data = batch(0, kBatch);
    const auto &x = data.first, &y = data.second;  // (a lambda cannot capture structured bindings in C++17)
    pipeline.step(x, y);
    report(error_of([&] { pipeline.step(x, y); }));
  }, options);
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 1u) << cohort::testing::describe(results);
    EXPECT_THAT(r.reports[0], HasSubstr("stage 1 (rank 1) raised in forward of microbatch 2 on its input Float [2, 16] "
                                        "from stage 0 (rank 0): boom in layer")) << "rank " << r.rank;
  }
}

TEST(PipelineFailures, WrongShapeBetweenStagesNamesBothStagesAndShapes) {
  auto results = run_ranks(2, [](int rank, int) {
    auto world = cohort::init();
    torch::nn::Sequential stage;  // each rank gives its own stage: stage 1 expects 32 features, gets 16
    if (rank == 0) stage->push_back(torch::nn::Linear(8, 16));
    else stage->push_back(torch::nn::Linear(32, 4));
    pp::Pipeline pipeline(world.comm_ptr(), {stage}, pp::PipelineOptions().schedule("gpipe").loss_fn(loss_fn));
    const auto data = batch(0, kBatch);
    const auto &x = data.first, &y = data.second;  // (a lambda cannot capture structured bindings in C++17)
    report(error_of([&] { pipeline.step(x, y); }));
  }, with_timeout(60));
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 1u) << cohort::testing::describe(results);
    EXPECT_THAT(r.reports[0], HasSubstr("stage 1 (rank 1) raised in forward of microbatch 0 on its input Float [3, 16] "
                                        "from stage 0 (rank 0): mat1 and mat2 shapes cannot be multiplied (3x16 and 32x4)"))
        << "rank " << r.rank;
  }
}

TEST(PipelineFailures, RankThatDiesIsNamedNotWaitedFor) {
  auto options = with_timeout(120);  // far longer than the test may take: the death must be seen at once
  options.expect_all_pass = false;
  auto results = run_ranks(2, [](int rank, int) {
    auto world = cohort::init();
    auto part = pp::partition(deep_mlp(), 2);
    auto stages = pp::stages_of_rank(part, 2, rank);
    if (rank == 1) stages[0]->push_back("exits", torch::nn::Functional([](torch::Tensor x) -> torch::Tensor { _exit(3); }));
    pp::Pipeline pipeline(world.comm_ptr(), stages, pp::PipelineOptions().loss_fn(loss_fn));
    const auto data = batch(0, kBatch);
    const auto &x = data.first, &y = data.second;  // (a lambda cannot capture structured bindings in C++17)
    report(error_of([&] { pipeline.step(x, y); }));
  }, options);
  ASSERT_EQ(results[1].exit_code, 3);
  ASSERT_EQ(results[0].reports.size(), 1u) << cohort::testing::describe(results);
  EXPECT_THAT(results[0].reports[0], HasSubstr("rank 1 died"));
}

}  // namespace pipeline_test
