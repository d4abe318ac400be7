// The ZeRO engine in checkpoints: an engine at stage 1-3 saved on N ranks loads on M ranks (N, M in
// 1..4) with exactly the full master weights and optimizer state it saved, its counters, and, at
// stage 3, parameters that train on identically.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "cohort/checkpoint.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace zero_checkpoint_test {

namespace fs = std::filesystem;
using cohort::testing::run_ranks;
using cohort::testing::RanksOptions;

namespace {

constexpr int kStages[] = {1, 2, 3};  // stage 0 is replicated state, as DDP's (checkpoint_reshard_test)

// 6 -> 7 -> 5 -> 3 (49, 40, 18 elements): no size divides evenly by 3 or 4.
torch::nn::Sequential make_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(6, 7), torch::nn::ReLU(), torch::nn::Linear(7, 5),
                               torch::nn::Tanh(), torch::nn::Linear(5, 3));
}

cohort::ZeroEngine<torch::nn::SequentialImpl> make_engine(int stage, torch::nn::Sequential model) {
  auto config = cohort::ZeroConfig()
                    .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(30))
                    .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(0.01));
  return cohort::initialize(config, model);
}

void train(cohort::ZeroEngineCore& core, cohort::ZeroEngine<torch::nn::SequentialImpl>& engine, int steps,
           int rank, int size) {
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(500 + step);
    auto x = torch::randn({12, 6});
    auto y = torch::randint(0, 3, {12}, torch::kLong);
    const int64_t per_rank = 12 / size;  // the same global batch of 12 at every world size
    auto out = engine.forward(x.narrow(0, rank * per_rank, per_rank));
    core.backward(torch::nn::functional::cross_entropy(out, y.narrow(0, rank * per_rank, per_rank)));
    core.step();
  }
}

// Every state tensor made whole: shards placed at their offsets and summed over ranks.
std::vector<torch::Tensor> whole_state(cohort::ZeroEngineCore& engine) {
  std::vector<torch::Tensor> out;
  auto& comm = cohort::current_world().comm();
  for (const auto& entry : engine.state_tensors()) {
    if (entry.kind != cohort::StateKind::kSharded) {
      out.push_back(entry.tensor.clone());
      continue;
    }
    auto full = torch::zeros({entry.flat_numel}, entry.tensor.options());
    full.narrow(0, entry.offset, entry.tensor.numel()).copy_(entry.tensor);
    comm.allreduce(full);
    out.push_back(full);
  }
  return out;
}

std::string dir_of(int stage, int saved_on) {
  return std::string(std::getenv("ZERO_CKPT_ROOT")) + "/stage" + std::to_string(stage) + "-n" +
         std::to_string(saved_on);
}

void save_body(int rank, int size) {
  cohort::init();
  for (int stage : kStages) {
    auto engine = make_engine(stage, make_model());
    train(engine, engine, 3, rank, size);
    cohort::CheckpointState state;
    state.add("engine", engine);
    cohort::save_checkpoint(dir_of(stage, size), state.set_step(engine.global_steps()));
    auto whole = whole_state(engine);
    if (rank == 0) torch::save(whole, dir_of(stage, size) + "/expected.pt");
  }
}

void load_body(int rank, int size) {
  cohort::init();
  for (int stage : kStages) {
    for (int saved_on = 1; saved_on <= 4; ++saved_on) {
      auto engine = make_engine(stage, make_model());
      cohort::CheckpointState state;
      state.add("engine", engine);
      auto info = cohort::load_checkpoint(dir_of(stage, saved_on), state, cohort::LoadOptions().must_exist(true));
      ASSERT_TRUE(info.has_value());
      EXPECT_EQ(info->world_size, saved_on);
      EXPECT_EQ(info->zero_stage, stage);
      EXPECT_EQ(engine.global_steps(), 3);
      std::vector<torch::Tensor> expected;
      torch::load(expected, dir_of(stage, saved_on) + "/expected.pt");
      auto whole = whole_state(engine);
      ASSERT_EQ(whole.size(), expected.size()) << "stage " << stage << " saved on " << saved_on;
      for (size_t i = 0; i < whole.size(); ++i)
        EXPECT_TRUE(whole[i].equal(expected[i])) << "stage " << stage << " saved on " << saved_on << ", tensor " << i;
    }
  }
}

TEST(ZeroCheckpoint, SavedOnNRanksLoadsOnMRanks) {
  // One body for every run_ranks call: a rank process runs the body of the first call it reaches,
  // so the phase comes from the environment.
  const fs::path root = fs::temp_directory_path() / ("cohort-zero-ckpt-" + std::to_string(::getpid()));
  auto body = [](int rank, int size) {
    if (std::string(std::getenv("ZERO_CKPT_PHASE")) == "save") {
      save_body(rank, size);
    } else {
      load_body(rank, size);
      cohort::testing::report("loaded");
    }
  };
  RanksOptions options;
  options.env["ZERO_CKPT_ROOT"] = root.string();
  if (!cohort::testing::is_rank_process()) fs::create_directories(root);
  options.env["ZERO_CKPT_PHASE"] = "save";
  for (int n = 1; n <= 4; ++n) run_ranks(n, body, options);
  options.env["ZERO_CKPT_PHASE"] = "load";
  for (int m = 1; m <= 4; ++m) {
    auto results = run_ranks(m, body, options);
    for (const auto& result : results)
      EXPECT_THAT(result.reports, ::testing::Contains("loaded")) << "rank " << result.rank << " of " << m;
  }
  if (!cohort::testing::is_rank_process()) fs::remove_all(root);
}

TEST(ZeroCheckpoint, ResumedStageThreeTrainsOnLikeAnUninterruptedRun) {
  // Same world size: 6 steps straight equal 3 steps, save, a fresh engine loads, 3 more (bitwise).
  const fs::path root = fs::temp_directory_path() / ("cohort-zero-resume-" + std::to_string(::getpid()));
  RanksOptions options;
  options.env["ZERO_CKPT_ROOT"] = root.string();
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    const std::string dir = std::string(std::getenv("ZERO_CKPT_ROOT")) + "/resume";
    auto straight = make_engine(3, make_model());
    train(straight, straight, 6, rank, size);
    {
      auto first = make_engine(3, make_model());
      train(first, first, 3, rank, size);
      cohort::CheckpointState state;
      state.add("engine", first).rng(false);
      cohort::save_checkpoint(dir, state.set_step(3));
    }
    auto resumed = make_engine(3, make_model());
    cohort::CheckpointState state;
    state.add("engine", resumed).rng(false);
    ASSERT_TRUE(cohort::load_checkpoint(dir, state).has_value());
    for (int step = 3; step < 6; ++step) {
      torch::manual_seed(500 + step);
      auto x = torch::randn({12, 6});
      auto y = torch::randint(0, 3, {12}, torch::kLong);
      auto out = resumed.forward(x.narrow(0, rank * 6, 6));
      resumed.backward(torch::nn::functional::cross_entropy(out, y.narrow(0, rank * 6, 6)));
      resumed.step();
    }
    auto a = straight.full_parameters(), b = resumed.full_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].second.equal(b[i].second)) << a[i].first;
  }, options);
  if (!cohort::testing::is_rank_process()) fs::remove_all(root);
}

}  // namespace

}  // namespace zero_checkpoint_test
