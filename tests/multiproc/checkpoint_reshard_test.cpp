// Checkpoints across world sizes on real rank processes: a test-only Stateful splits flat tensors
// unevenly across ranks (1001 elements, and 3 elements so that some ranks hold none), next to a
// replicated model with Adam state and per-rank tensors; saved on N ranks and loaded on M ranks
// (N, M in 1..4), every rank gets exactly its new range, and the model and optimizer come back
// whole. A rank that fails or dies during a save makes every rank raise and leaves `latest` alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/checkpoint.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_reshard_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;
using cohort::testing::RanksOptions;

namespace {

// [begin, end) of rank r when n elements are split in chunks of ceil(n / size), as ZeRO pads them.
std::pair<int64_t, int64_t> range_of(int64_t n, int rank, int size) {
  const int64_t chunk = (n + size - 1) / size;
  return {std::min(n, rank * chunk), std::min(n, (rank + 1) * chunk)};
}

// Closed-form contents: element i of "weights" is 1.5 * i, of "ids" is 100 + i.
class FlatShards : public cohort::Stateful {
 public:
  FlatShards(int rank, int size, bool fill) : rank_(rank) {
    const auto [b, e] = range_of(1001, rank, size);
    const auto [ib, ie] = range_of(3, rank, size);
    weights_ = fill ? torch::arange(b, e, torch::kFloat32) * 1.5 : torch::zeros({e - b});
    ids_ = fill ? torch::arange(ib, ie, torch::kInt64) + 100 : torch::zeros({ie - ib}, torch::kInt64);
    begin_ = b;
    ids_begin_ = ib;
    mine_ = torch::full({2}, fill ? rank : -1, torch::kInt32);
  }
  std::vector<cohort::StateTensor> state_tensors() override {
    return {{"weights", weights_, cohort::StateKind::kSharded, 1001, begin_},
            {"ids", ids_, cohort::StateKind::kSharded, 3, ids_begin_},
            {"mine", mine_, cohort::StateKind::kPerRank}};
  }
  // The mode's key, zero_stage, with the engine's numbers a checkpoint holds beside it.
  cohort::StateValues state_values() const override {
    return {{"loss_scale", 1024},
            {"zero_stage", 2},
            {"zero.global_steps", 0},
            {"zero.skipped_steps", 0},
            {"zero.micro_steps", 0},
            {"zero.loss_scaler.scale", 1},
            {"zero.loss_scaler.iter", 0},
            {"zero.loss_scaler.last_overflow_iter", -1},
            {"zero.loss_scaler.hysteresis_left", 2}};
  }
  void load_state_values(const cohort::StateValues& values) override { loaded_ = values; }

  torch::Tensor weights_, ids_, mine_;
  int64_t begin_ = 0, ids_begin_ = 0;
  int rank_;
  cohort::StateValues loaded_;
};

// Throws (or dies) on one rank while its state is collected for saving.
class FailingState : public cohort::Stateful {
 public:
  FailingState(int rank, int fail_rank, bool die) : rank_(rank), fail_rank_(fail_rank), die_(die) {}
  std::vector<cohort::StateTensor> state_tensors() override {
    if (armed && rank_ == fail_rank_) {
      if (die_) ::kill(::getpid(), SIGKILL);
      throw cohort::Error("boom");
    }
    return {{"x", x_}};
  }
  bool armed = false;

 private:
  int rank_, fail_rank_;
  bool die_;
  torch::Tensor x_ = torch::ones({4});
};

// The same model and Adam state on every rank: seeded, then 3 local steps on seeded data.
cohort::testing::Mlp seeded_mlp(int seed) {
  torch::manual_seed(seed);
  return cohort::testing::Mlp();
}

struct Trained {
  cohort::testing::Mlp model;
  torch::optim::Adam opt;
  Trained(int seed, int steps)
      : model(seeded_mlp(seed)), opt(model->parameters(), torch::optim::AdamOptions(1e-2)) {
    torch::manual_seed(3);
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      model->forward(torch::randn({4, 20})).pow(2).mean().backward();
      opt.step();
    }
  }
};

// A directory that the test process makes and its rank processes find in the environment.
std::string shared_dir(RanksOptions& options) {
  options.env["COHORT_TIMEOUT"] = "30";
  return cohort::testing::shared_temp_dir(options, "CKPT_TEST_DIR", "checkpoint_reshard_");
}

}  // namespace

TEST(CheckpointReshard, SavedOnNLoadsOnMForAllNAndM) {
  RanksOptions options;
  const std::string dir = shared_dir(options);
  // A rank process runs the body of the first run_ranks call it reaches, so every call passes the
  // same body, which picks its phase from the environment.
  const auto body = [&](int rank, int size) {
    cohort::init();
    if (std::string(std::getenv("CKPT_PHASE")) == "save") {
      FlatShards shards(rank, size, true);
      Trained trained(1, 3);
      cohort::CheckpointState state;
      state.add("engine", shards).add("model", *trained.model).add("optimizer", trained.opt);
      cohort::save_checkpoint(dir + "/n" + std::to_string(size), state.set_step(10 * size));
      return;
    }
    for (int saved = 1; saved <= 4; ++saved) {
      FlatShards shards(rank, size, false);
      Trained fresh(7, 0);
      cohort::CheckpointState state;
      state.add("engine", shards).add("model", *fresh.model).add("optimizer", fresh.opt);
      const auto info = cohort::load_checkpoint(dir + "/n" + std::to_string(saved), state);
      ASSERT_TRUE(info);
      EXPECT_EQ(info->world_size, saved);
      EXPECT_EQ(info->zero_stage, 2);
      EXPECT_EQ(state.step(), 10 * saved);
      const auto [b, e] = range_of(1001, rank, size);
      EXPECT_TRUE(torch::equal(shards.weights_, torch::arange(b, e, torch::kFloat32) * 1.5))
          << "saved on " << saved;
      const auto [ib, ie] = range_of(3, rank, size);
      EXPECT_TRUE(torch::equal(shards.ids_, torch::arange(ib, ie, torch::kInt64) + 100));
      // A rank that did not exist when saving takes rank 0's per-rank state.
      EXPECT_EQ(shards.mine_[0].item<int>(), rank < saved ? rank : 0) << "saved on " << saved;
      EXPECT_EQ(shards.loaded_.at("loss_scale"), 1024);
      // The model and Adam state: one more step on both gives the same weights.
      Trained reference(1, 3);
      for (Trained* t : {&reference, &fresh}) {
        torch::manual_seed(11);
        t->opt.zero_grad();
        t->model->forward(torch::randn({4, 20})).pow(2).mean().backward();
        t->opt.step();
      }
      const auto p = fresh.model->parameters(), q = reference.model->parameters();
      for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(torch::equal(p[i], q[i])) << i;
    }
    report("loaded");
  };
  options.env["CKPT_PHASE"] = "save";
  for (int saved = 1; saved <= 4; ++saved) run_ranks(saved, body, options);
  options.env["CKPT_PHASE"] = "load";
  for (int loading = 1; loading <= 4; ++loading) {
    const auto results = run_ranks(loading, body, options);
    for (const auto& r : results) EXPECT_EQ(r.reports, std::vector<std::string>{"loaded"}) << r.output;
  }
  if (!cohort::testing::is_rank_process()) fs::remove_all(dir);
}

TEST(CheckpointReshard, AFailingRankFailsTheSaveEverywhere) {
  RanksOptions options;
  const std::string dir = shared_dir(options);
  const auto results = run_ranks(3, [&](int rank, int size) {
    cohort::init();
    FailingState failing(rank, 1, false);
    cohort::CheckpointState state;
    state.add("failing", failing);
    cohort::save_checkpoint(dir, state.set_step(4));
    failing.armed = true;
    try {
      cohort::save_checkpoint(dir, state.set_step(5));
      ADD_FAILURE() << "the save must fail";
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  }, options);
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 1u) << r.output;
    const std::string who = r.rank == 1 ? "" : "rank 1: ";
    EXPECT_EQ(r.reports[0], "[rank " + std::to_string(r.rank) + "/3] save_checkpoint(" + dir +
                                "/step-5) failed: " + who + "boom");
  }
  if (cohort::testing::is_rank_process()) return;
  EXPECT_FALSE(fs::exists(dir + "/.step-5.tmp"));
  cohort::CheckpointState state;
  FailingState reader(0, 1, false);
  state.add("failing", reader);
  EXPECT_EQ(cohort::load_checkpoint(dir, state)->step, 4);
  fs::remove_all(dir);
}

TEST(CheckpointReshard, ARankKilledDuringASaveLeavesThePreviousCheckpoint) {
  RanksOptions options;
  options.expect_all_pass = false;
  const std::string dir = shared_dir(options);
  const auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    FailingState failing(rank, 1, true);
    cohort::CheckpointState state;
    state.add("failing", failing);
    cohort::save_checkpoint(dir, state.set_step(4));
    failing.armed = true;
    try {
      cohort::save_checkpoint(dir, state.set_step(5));
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  }, options);
  EXPECT_EQ(results[1].signal, SIGKILL);
  ASSERT_EQ(results[0].reports.size(), 1u) << results[0].output;
  EXPECT_THAT(results[0].reports[0], HasSubstr("rank 1 died"));
  if (cohort::testing::is_rank_process()) return;
  EXPECT_FALSE(fs::exists(dir + "/.step-5.tmp"));  // it died collecting, before the temporary was made
  cohort::CheckpointState state;
  FailingState reader(0, 1, false);
  state.add("failing", reader);
  const auto info = cohort::load_checkpoint(dir, state);  // on one rank: resharded
  EXPECT_EQ(info->step, 4);
  EXPECT_TRUE(info->skipped.empty());
  fs::remove_all(dir);
}

}  // namespace checkpoint_reshard_test
