// The pipeline runtime on real rank processes: trained with GPipe, 1F1B and interleaved 1F1B over 2, 3
// and 4 ranks (uneven partitions, chunks that do not divide the batch, a smaller last batch,
// recomputation, SGD with momentum and Adam), the stages' parameters and the loss equal one process
// training the whole model on the whole batch; likewise on a 2 x 2 pipeline x DDP mesh. The runtime's
// count of activations held shows 1F1B's bound; a stage that raises, a stage given the wrong shape and a
// rank that dies make every rank raise naming it. Partitioning is tested alone, without processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cohort/checkpoint.h"
#include "cohort/mesh.h"
#include "cohort/pipeline.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/manifest_seal.h"
#include "support/multiproc.h"
#include "support/safetensors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace pipeline_test {

using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::report;
using cohort::testing::run_ranks;
namespace pp = cohort::pipeline;

namespace {

constexpr int kSteps = 20;
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

// The same optimizers for the ZeRO engines of a pipeline, over their fp32 shards.
pp::ZeroOptimizerFactory zero_optimizer(const std::string& kind) {
  return [kind](std::vector<torch::Tensor> shards) { return make_optimizer(kind, std::move(shards)); };
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
  int zero_stage = 0;                  // ZeRO of this stage over `data` instead of DDP (0: none)
};

pp::PipelineOptions options_of(const Case& c) {
  auto options = pp::PipelineOptions().schedule(c.schedule).stages_per_rank(c.stages_per_rank).chunks(c.chunks)
                     .loss_fn(loss_fn).recompute(c.recompute).data_comm(c.data);
  if (c.zero_stage > 0)
    options.zero(cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(c.zero_stage)))
        .zero_optimizer(zero_optimizer(c.optimizer));
  return options;
}

// Trains the pipeline and the whole model in this process side by side; the loss of each step and the
// stages' parameters must agree. Returns the largest activation count of a step.
int expect_equivalent(const std::shared_ptr<cohort::Comm>& pipe, const Case& c) {
  auto model = deep_mlp(), reference = deep_mlp();
  const int ranks = pipe->size(), rank = pipe->rank();
  auto part = pp::partition(model, ranks * c.stages_per_rank, c.partition);
  pp::Pipeline pipeline(pipe, pp::stages_of_rank(part, ranks, rank), options_of(c));
  auto opt = c.zero_stage > 0 ? nullptr : make_optimizer(c.optimizer, pipeline.parameters());
  auto ref_opt = make_optimizer(c.optimizer, reference->parameters());
  const int replicas = c.data ? c.data->size() : 1, replica = c.data ? c.data->rank() : 0;
  int peak = 0;
  for (int step = 0; step < kSteps; ++step) {
    const int rows = step == kSteps - 1 ? 7 : kBatch;
    auto [x, y] = batch(step, rows * replicas);
    auto mine = torch::indexing::Slice(replica * rows, (replica + 1) * rows);
    if (opt) opt->zero_grad();
    double loss = pipeline.step(x.index({mine}), y.index({mine})).item<double>();
    if (opt) opt->step();
    else pipeline.optimizer_step();
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
  if (c.zero_stage == 3)  // between steps a stage-3 stage holds shards only: its parameters have no storage
    for (const auto& p : pipeline.parameters()) EXPECT_EQ(p.storage().nbytes(), 0u) << "rank " << rank;
  const auto mine = pipeline.full_parameters();  // gathered from the shards under ZeRO
  EXPECT_FALSE(mine.empty());
  for (const auto& [name, value] : mine) {
    const double diff = (value - expected[name]).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << c.schedule << "/" << c.optimizer << " rank " << rank << " parameter " << name;
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

// Issue 13's Done-when: every schedule with SGD (momentum) and Adam over 20 steps at 2, 3 and 4 stages,
// uneven partitions and chunks that do not divide the batch (10 rows; the last step's 7). Few chunks
// keep the messages, and so the test's time, down: each activation costs a few waits on the Comm.
TEST(PipelineEquivalence, TwoStagesEverySchedule) {
  run_ranks(2, [](int rank, int) {
    auto world = cohort::init();
    for (std::string optimizer : {"sgd", "adam"}) {
      const int gpipe = expect_equivalent(world.comm_ptr(), {"gpipe", 1, optimizer, {}, 3});
      const int one_f_one_b =
          expect_equivalent(world.comm_ptr(), {"1f1b", 1, optimizer, pp::PartitionOptions().boundaries({0, 3, 11}), 3});
      expect_equivalent(world.comm_ptr(), {"interleaved", 2, optimizer, {}, 3});
      // GPipe holds every microbatch; 1F1B (stages - stage index).
      EXPECT_EQ(gpipe, 3);
      EXPECT_EQ(one_f_one_b, 2 - rank);
    }
  }, with_timeout(60));
}

// 8 chunks: the last step's 7 rows leave microbatch 7 empty (an epoch's short last batch); it runs
// through both stages, adds nothing, and the step still equals one process's on the 7 rows.
TEST(PipelineEquivalence, FewerRowsThanChunksLeaveMicrobatchesEmpty) {
  run_ranks(2, [](int, int) {
    auto world = cohort::init();
    expect_equivalent(world.comm_ptr(), {"1f1b", 1, "sgd", {}, 8});
    expect_equivalent(world.comm_ptr(), {"gpipe", 1, "adam", {}, 8, true});
  }, with_timeout(60));
}

TEST(PipelineEquivalence, ThreeStagesUnevenPartitionAndRecompute) {
  run_ranks(3, [](int, int) {
    auto world = cohort::init();
    auto uneven = pp::PartitionOptions().boundaries({0, 1, 9, 11});
    auto uniform = pp::PartitionOptions().method("uniform");
    expect_equivalent(world.comm_ptr(), {"1f1b", 1, "sgd", uneven, 3});
    expect_equivalent(world.comm_ptr(), {"gpipe", 1, "sgd", uniform, 3, true});
    expect_equivalent(world.comm_ptr(), {"interleaved", 2, "sgd", uniform, 3});
    expect_equivalent(world.comm_ptr(), {"gpipe", 1, "adam", uneven, 3});
    expect_equivalent(world.comm_ptr(), {"1f1b", 1, "adam", uniform, 4, true});
    expect_equivalent(world.comm_ptr(), {"interleaved", 2, "adam", pp::PartitionOptions(), 4});
  }, with_timeout(60));
}

TEST(PipelineEquivalence, FourStagesAndActivationCounts) {
  run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    for (std::string optimizer : {"sgd", "adam"}) {
      const int gpipe = expect_equivalent(world.comm_ptr(), {"gpipe", 1, optimizer, {}, 4});
      const int one_f_one_b = expect_equivalent(world.comm_ptr(), {"1f1b", 1, optimizer, {}, 4});
      expect_equivalent(world.comm_ptr(), {"interleaved", 2, optimizer, pp::PartitionOptions().method("uniform"), 4});
      EXPECT_EQ(gpipe, 4);
      EXPECT_EQ(one_f_one_b, 4 - rank);  // PipeDream-flush: warm-up of (stages - index - 1), then one more
      if (optimizer == "sgd") report("peak 1f1b=" + std::to_string(one_f_one_b) + " gpipe=" + std::to_string(gpipe));
    }
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

// ZeRO stage 1 over each stage's data group: the optimizer state of a stage is split between its two
// replicas, its gradients reduce-scattered with the last microbatch; the result equals one process.
// Stage 3 (FSDP per stage): the parameters sharded too, each layer gathered for every microbatch's
// forward and backward, every microbatch's gradients reduce-scattered; one process's result too.
TEST(PipelineEquivalence, TwoByTwoPipelineTimesZeroOneAndThree) {
  run_ranks(4, [](int, int) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"pipe", 2}, {"data", 2}});
    for (std::string optimizer : {"sgd", "adam"})
      for (int stage : {1, 3}) {
        Case c{optimizer == "sgd" ? "gpipe" : "1f1b", 1, optimizer};
        c.data = mesh.group_ptr("data");
        c.zero_stage = stage;
        expect_equivalent(mesh.group_ptr("pipe"), c);
      }
    Case interleaved{"interleaved", 2, "adam"};
    interleaved.data = mesh.group_ptr("data");
    interleaved.zero_stage = 3;
    expect_equivalent(mesh.group_ptr("pipe"), interleaved);
    auto part = pp::partition(deep_mlp(), 2);
    auto stages = pp::stages_of_rank(part, 2, mesh.group_ptr("pipe")->rank());
    auto config = cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(3));
    EXPECT_THAT(error_of([&] {
      pp::Pipeline(mesh.group_ptr("pipe"), stages, pp::PipelineOptions().loss_fn(loss_fn).data_comm(mesh.group_ptr("data"))
                                                      .zero(config).zero_optimizer(zero_optimizer("sgd")).recompute(true));
    }), HasSubstr("Pipeline: PipelineOptions::recompute with ZeRO stage 3: the engine recomputes a unit's forward "
                  "itself (activation_checkpointing of its units); use that instead"));
    config.zero_optimization().stage(0);
    EXPECT_THAT(error_of([&] {
      pp::Pipeline(mesh.group_ptr("pipe"), stages, pp::PipelineOptions().loss_fn(loss_fn).data_comm(mesh.group_ptr("data"))
                                                      .zero(config).zero_optimizer(zero_optimizer("sgd")));
    }), HasSubstr("PipelineOptions::zero has zero_optimization.stage 0; a pipeline runs ZeRO stage 1, 2 or 3"));
  }, with_timeout(90));
}

namespace {

// One pipelined training (1F1B, Adam) with its checkpoint state: the stages' shards by whole-model names.
// With `zero_stage` > 0 the stages are ZeRO engines over `data` (their state: Pipeline::zero_state).
struct CheckpointedRun {
  CheckpointedRun(const std::shared_ptr<cohort::Comm>& comm, torch::nn::Sequential model_,
                  const pp::PartitionOptions& cut, std::shared_ptr<cohort::Comm> data = nullptr, int zero_stage = 0)
      : model(std::move(model_)),
        pipeline(comm, pp::stages_of_rank(pp::partition(model, comm->size(), cut), comm->size(), comm->rank()),
                 options(std::move(data), zero_stage)),
        opt(zero_stage > 0 ? nullptr : make_optimizer("adam", pipeline.parameters())) {
    if (opt) state.add("model", pipeline.model_state()).add("optimizer", pipeline.optimizer_state(*opt));
    else state.add("zero", pipeline.zero_state());
  }
  static pp::PipelineOptions options(std::shared_ptr<cohort::Comm> data, int zero_stage) {
    auto out = pp::PipelineOptions().schedule("1f1b").loss_fn(loss_fn).data_comm(std::move(data));
    if (zero_stage > 0)
      out.zero(cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(zero_stage)))
          .zero_optimizer(zero_optimizer("adam"));
    return out;
  }
  void train(int from, int to) {
    for (int step = from; step < to; ++step) {
      auto [x, y] = batch(step, kBatch);
      if (opt) opt->zero_grad();
      pipeline.step(x, y);
      if (opt) opt->step();
      else pipeline.optimizer_step();
    }
  }
  std::map<std::string, torch::Tensor> parameters() {
    std::map<std::string, torch::Tensor> out;
    for (auto& [name, value] : pipeline.full_parameters()) out[name] = value;
    return out;
  }
  torch::nn::Sequential model;
  pp::Pipeline pipeline;
  std::unique_ptr<torch::optim::Optimizer> opt;
  cohort::CheckpointState state;
};

// The whole model trained `steps` steps in this process, as CheckpointedRun trains it.
torch::nn::Sequential trained_reference(int steps) {
  auto model = deep_mlp();
  auto opt = make_optimizer("adam", model->parameters());
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, kBatch);
    opt->zero_grad();
    loss_fn(model->forward(x), y).backward();
    opt->step();
  }
  return model;
}

void expect_near_reference(const std::map<std::string, torch::Tensor>& parameters, int steps, const std::string& what) {
  auto expected = trained_reference(steps)->named_parameters();
  for (const auto& [name, value] : parameters)
    EXPECT_LT((value - expected[name]).abs().max().item<double>(), 1e-5) << what << ": parameter " << name;
}

std::string run_tool(const std::string& args) {
  const char* build = std::getenv("COHORT_BUILD_DIR");
  const std::string command = std::string(build ? build : "build") + "/tools/cohort_ckpt/cohort-ckpt " + args + " 2>&1";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  out += "exit " + std::to_string(WEXITSTATUS(::pclose(pipe)));
  return out;
}

// Hostile pass 12, M-4: a layer's optimizer state deleted whole from a copy of `step` (resealed) read
// as "no state yet"; the entry's count of its parameters sees it.
void expect_deleted_state_seen(const std::string& step) {
  const std::string copy = step + "-edited";
  std::filesystem::copy(step, copy, std::filesystem::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(copy + "/manifest.json"));
  auto& t = j["tensors"];
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](const nlohmann::json& r) { return r["name"].get<std::string>().rfind("optimizer/0.weight.", 0) == 0; }),
          t.end());
  cohort::testing::reseal_manifest(j);
  std::ofstream(copy + "/manifest.json", std::ios::trunc) << j.dump();
  const std::string out = run_tool("verify " + copy);
  EXPECT_THAT(out, HasSubstr("'values.optimizer.pipeline.params' is 14, but 'optimizer' has 13 step tensors"));
  EXPECT_THAT(out, HasSubstr("BAD (1 problem(s))"));
  std::filesystem::remove_all(copy);
}

}  // namespace

// Each stage saves its shard (every tensor once, by its whole-model name); fresh objects that load it
// and train on equal the run that never stopped; another partition loads it too (by name); a model
// with a layer fewer is refused naming the tensor no rank holds; cohort-ckpt consolidate makes the
// whole model's state_dict of it, equal to the stages that were saved.
TEST(PipelineCheckpoint, ResumesExactlyReshardsByNameAndConsolidates) {
  cohort::testing::RanksOptions options = with_timeout(60);
  const std::string dir = cohort::testing::shared_temp_dir(options, "PIPELINE_CKPT_DIR", "pipeline_checkpoint_");
  run_ranks(2, [&](int rank, int) {
    auto world = cohort::init();
    auto comm = world.comm_ptr();
    CheckpointedRun first(comm, deep_mlp(), {});
    first.train(0, 3);
    cohort::save_checkpoint(dir, first.state.set_step(3), cohort::SaveOptions().comm(comm));
    const auto saved = first.parameters();
    if (rank == 0) {
      const std::string info = run_tool("info --tensors " + dir);
      EXPECT_THAT(info, HasSubstr("model/0.weight  owned float32 [16, 8]  1 piece(s)"));
      EXPECT_THAT(info, HasSubstr("optimizer/10.weight.exp_avg  owned float32 [4, 16]  1 piece(s)"));
      EXPECT_THAT(run_tool("consolidate " + dir + " -o " + dir + "/whole.safetensors"), HasSubstr("exit 0"));
      expect_deleted_state_seen(dir + "/step-3");
    }
    comm->barrier();
    // The consolidated file holds this rank's stage as it was saved.
    const auto whole = cohort::testing::read_safetensors(dir + "/whole.safetensors");
    for (const auto& [name, value] : saved)
      EXPECT_TRUE(whole.count("model/" + name) && torch::equal(whole.at("model/" + name), value)) << name;
    first.train(3, 6);

    CheckpointedRun again(comm, deep_mlp(), {});
    const auto info = cohort::load_checkpoint(dir, again.state, cohort::LoadOptions().comm(comm).must_exist(true));
    EXPECT_EQ(info->step, 3);
    again.train(3, 6);
    const auto resumed = again.parameters();
    for (const auto& [name, value] : first.parameters())
      EXPECT_TRUE(torch::equal(value, resumed.at(name))) << "rank " << rank << " parameter " << name;

    CheckpointedRun other(comm, deep_mlp(), pp::PartitionOptions().boundaries({0, 8, 11}));
    cohort::load_checkpoint(dir, other.state, cohort::LoadOptions().comm(comm).must_exist(true));
    other.train(3, 6);
    expect_near_reference(other.parameters(), 6, "another partition");
    expect_near_reference(first.parameters(), 6, "uninterrupted");

    auto full = deep_mlp();
    torch::nn::Sequential shorter;  // the same layers but the last
    for (auto it = full->begin(); it + 1 != full->end(); ++it) shorter->push_back(*it);
    EXPECT_THAT(error_of([&] {
      CheckpointedRun fewer(comm, shorter, {});
      cohort::load_checkpoint(dir, fewer.state, cohort::LoadOptions().comm(comm));
    }), HasSubstr("it has tensor 'model/10.bias', which this state does not have"));
  }, options);
  if (cohort::testing::is_rank_process()) return;
  // The consolidated state_dict loads into the unsplit model.
  auto whole = deep_mlp();
  const auto tensors = cohort::testing::read_safetensors(dir + "/whole.safetensors");
  for (auto& p : whole->named_parameters()) {
    ASSERT_TRUE(tensors.count("model/" + p.key())) << p.key();
    torch::NoGradGuard no_grad;
    p.value().copy_(tensors.at("model/" + p.key()));
  }
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& p : whole->named_parameters()) loaded[p.key()] = p.value();
  expect_near_reference(loaded, 3, "consolidated");
  std::filesystem::remove_all(dir);
}

// On a 2 x 2 pipeline x DDP mesh both replicas of a stage hold its tensors: each is written once (the
// replicas share the writing) and both replicas load it.
TEST(PipelineCheckpoint, DataParallelReplicasWriteEachTensorOnce) {
  cohort::testing::RanksOptions options = with_timeout(60);
  const std::string dir = cohort::testing::shared_temp_dir(options, "PIPELINE_CKPT_DIR", "pipeline_replicas_");
  run_ranks(4, [&](int rank, int) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"pipe", 2}, {"data", 2}});
    CheckpointedRun first(mesh.group_ptr("pipe"), deep_mlp(), {}, mesh.group_ptr("data"));
    first.train(0, 2);
    cohort::save_checkpoint(dir, first.state.set_step(2), cohort::SaveOptions().comm(world.comm_ptr()));
    if (rank == 0) {
      const std::string info = run_tool("info --tensors " + dir);
      EXPECT_THAT(info, HasSubstr("saved by 4 rank(s)"));
      EXPECT_THAT(info, HasSubstr("model/0.weight  owned float32 [16, 8]  1 piece(s)"));
      EXPECT_THAT(info, HasSubstr("optimizer/9.weight.exp_avg_sq  owned float32 [16, 16]  1 piece(s)"));
    }
    first.train(2, 4);
    CheckpointedRun again(mesh.group_ptr("pipe"), deep_mlp(), {}, mesh.group_ptr("data"));
    cohort::load_checkpoint(dir, again.state, cohort::LoadOptions().comm(world.comm_ptr()).must_exist(true));
    again.train(2, 4);
    const auto resumed = again.parameters();
    for (const auto& [name, value] : first.parameters())
      EXPECT_TRUE(torch::equal(value, resumed.at(name))) << "rank " << rank << " parameter " << name;
  }, options);
  if (!cohort::testing::is_rank_process()) std::filesystem::remove_all(dir);
}

// With ZeRO over the data group (stage 1, and stage 3: FSDP per stage) the engines' state by parameter
// (Pipeline::zero_state) resumes exactly, and at another partition by name; model_state() says to use it.
TEST(PipelineCheckpoint, ZeroStagesResumeExactlyAndAtAnotherPartition) {
  cohort::testing::RanksOptions options = with_timeout(90);
  const std::string dir = cohort::testing::shared_temp_dir(options, "PIPELINE_CKPT_DIR", "pipeline_zero_");
  run_ranks(4, [&](int rank, int) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"pipe", 2}, {"data", 2}});
    for (int stage : {1, 3}) {
      const std::string root = dir + "/zero" + std::to_string(stage);
      CheckpointedRun first(mesh.group_ptr("pipe"), deep_mlp(), {}, mesh.group_ptr("data"), stage);
      first.train(0, 2);
      cohort::save_checkpoint(root, first.state.set_step(2), cohort::SaveOptions().comm(world.comm_ptr()));
      first.train(2, 4);
      CheckpointedRun again(mesh.group_ptr("pipe"), deep_mlp(), {}, mesh.group_ptr("data"), stage);
      cohort::load_checkpoint(root, again.state, cohort::LoadOptions().comm(world.comm_ptr()).must_exist(true));
      again.train(2, 4);
      const auto resumed = again.parameters(), uninterrupted = first.parameters();
      for (const auto& [name, value] : uninterrupted)
        EXPECT_TRUE(torch::equal(value, resumed.at(name))) << "stage " << stage << " rank " << rank << " " << name;
      CheckpointedRun other(mesh.group_ptr("pipe"), deep_mlp(), pp::PartitionOptions().boundaries({0, 8, 11}),
                            mesh.group_ptr("data"), stage);
      cohort::load_checkpoint(root, other.state, cohort::LoadOptions().comm(world.comm_ptr()).must_exist(true));
      other.train(2, 4);
      expect_near_reference(other.parameters(), 4, "zero stage " + std::to_string(stage) + ", another partition");
      expect_near_reference(uninterrupted, 4, "zero stage " + std::to_string(stage) + ", uninterrupted");
      EXPECT_THAT(error_of([&] { first.pipeline.model_state(); }),
                  HasSubstr("keeps its weights and optimizer state in each stage's ZeRO engine: add "
                            "Pipeline::zero_state() instead"));
    }
  }, options);
  if (!cohort::testing::is_rank_process()) std::filesystem::remove_all(dir);
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
