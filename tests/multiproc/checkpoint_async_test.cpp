// Async saves (SaveOptions::async) across ranks: the checkpoint holds the state of the call, not what
// training does while it is written; a load waits for the save in flight; a failed background write is
// raised at the next save on every rank, once; a rank killed during the write leaves the previous
// checkpoint `latest`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "cohort/checkpoint.h"
#include "cohort/world.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_async_test {

namespace fs = std::filesystem;
using cohort::testing::RanksOptions;
using cohort::testing::report;
using cohort::testing::run_ranks;
using ::testing::HasSubstr;

namespace {

std::string shared_dir(RanksOptions& options) {
  return cohort::testing::shared_temp_dir(options, "CKPT_ASYNC_DIR", "checkpoint_async_");
}

// What the ranks save: a replicated weight and a per-rank tensor, both changed in place by training.
struct Model {
  torch::Tensor weight = torch::arange(1000, torch::kFloat);
  torch::Tensor local;
  explicit Model(int rank) : local(torch::full({3}, float(rank))) {}
};

class ModelState : public cohort::Stateful {
 public:
  explicit ModelState(Model& model) : model_(model) {}
  std::vector<cohort::StateTensor> state_tensors() override {
    return {{"weight", model_.weight}, {"local", model_.local, cohort::StateKind::kPerRank}};
  }

 private:
  Model& model_;
};

cohort::CheckpointState state_of(Model& model) {
  cohort::CheckpointState state;
  state.rng(false).add("model", std::make_shared<ModelState>(model));
  return state;
}

const auto kAsync = cohort::SaveOptions().async(true);

}  // namespace

TEST(CheckpointAsync, TheCheckpointHoldsTheStateOfTheCallAndALoadWaitsForIt) {
  RanksOptions options;
  const std::string dir = shared_dir(options);
  const auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    Model model(rank);
    cohort::CheckpointState state = state_of(model);
    for (int step = 1; step <= 3; ++step) {
      cohort::save_checkpoint(dir, state.set_step(step), kAsync);
      model.weight.add_(1);  // training goes on while the save is written
      model.local.add_(10);
    }
    Model loaded(rank);
    cohort::CheckpointState into = state_of(loaded);
    const auto info = cohort::load_checkpoint(dir, into);  // waits for step 3's write
    ASSERT_TRUE(info);
    EXPECT_EQ(info->step, 3);
    EXPECT_TRUE(loaded.weight.equal(torch::arange(1000, torch::kFloat) + 2));
    EXPECT_TRUE(loaded.local.equal(torch::full({3}, float(rank) + 20)));
    cohort::finish_checkpoint_saves();
    report("loaded");
  }, options);
  for (const auto& r : results) EXPECT_EQ(r.reports, std::vector<std::string>{"loaded"}) << r.output;
  if (cohort::testing::is_rank_process()) return;
  for (int step = 1; step <= 3; ++step) EXPECT_TRUE(fs::exists(dir + "/step-" + std::to_string(step) + "/manifest.json"));
  fs::remove_all(dir);
}

TEST(CheckpointAsync, AFailedBackgroundWriteIsRaisedAtTheNextSaveOnEveryRankOnce) {
  RanksOptions options;
  const std::string dir = shared_dir(options);
  const std::string blocked = dir + "/a-file";  // a checkpoint directory that is a file
  if (!cohort::testing::is_rank_process()) std::ofstream(blocked) << "x";
  const auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    Model model(rank);
    cohort::CheckpointState state = state_of(model);
    cohort::save_checkpoint(blocked, state.set_step(1), kAsync);  // returns: the write fails later
    try {
      cohort::save_checkpoint(dir + "/ckpt", state.set_step(2), kAsync);
      ADD_FAILURE() << "the next save must raise the failed write";
    } catch (const cohort::Error& e) {
      report(e.what());
    }
    cohort::save_checkpoint(dir + "/ckpt", state.set_step(3), kAsync);  // raised once: this one runs
    cohort::finish_checkpoint_saves();
    report("finished");
  }, options);
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 2u) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("[rank " + std::to_string(r.rank) + "/2] save_checkpoint(" + dir +
                                        "/ckpt/step-2) was not done: async save_checkpoint(" + blocked +
                                        "/step-1) failed: "))
        << r.output;
    EXPECT_EQ(r.reports[1], "finished");
  }
  if (cohort::testing::is_rank_process()) return;
  EXPECT_TRUE(fs::exists(dir + "/ckpt/step-3/manifest.json"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt/step-2"));
  fs::remove_all(dir);
}

// Review 58, S3: an error only one rank holds (its own async save on a Comm of one failed) is raised at
// the next save on every rank at once, not on that rank alone while the other waits for it.
TEST(CheckpointAsync, AnErrorOneRankHoldsIsRaisedAtTheNextSaveOnEveryRank) {
  RanksOptions options;
  const std::string dir = shared_dir(options);
  const std::string blocked = dir + "/a-file";
  if (!cohort::testing::is_rank_process()) std::ofstream(blocked) << "x";
  const auto results = run_ranks(2, [&](int rank, int size) {
    auto world = cohort::init();
    auto alone = world.comm().split(rank);  // a Comm of one per rank
    Model model(rank);
    cohort::CheckpointState state = state_of(model);
    if (rank == 0) cohort::save_checkpoint(blocked, state.set_step(1), cohort::SaveOptions().async(true).comm(alone));
    try {
      cohort::save_checkpoint(dir + "/ckpt", state.set_step(2), kAsync);
      ADD_FAILURE() << "the save must raise rank 0's failed write";
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  }, options);
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 1u) << r.output;
    const std::string who = r.rank == 0 ? "" : "rank 0: ";
    EXPECT_THAT(r.reports[0], HasSubstr("save_checkpoint(" + dir + "/ckpt/step-2) was not done: the save before it failed: " +
                                        who + "async save_checkpoint(" + blocked + "/step-1) failed: "))
        << r.output;
  }
  if (!cohort::testing::is_rank_process()) fs::remove_all(dir);
}

// Review 58, S1: the writer's Comm is split when any rank needs it, though the ranks' histories differ
// (rank 0 finished its saves, which let its writer go; an async save on a Comm of one on rank 1).
TEST(CheckpointAsync, TheWritersCommIsSplitOnEveryRankWhenAnyNeedsIt) {
  RanksOptions options;
  const std::string dir = shared_dir(options);
  const auto results = run_ranks(2, [&](int rank, int size) {
    auto world = cohort::init();
    auto alone = world.comm().split(rank);
    Model model(rank);
    cohort::CheckpointState state = state_of(model);
    cohort::save_checkpoint(dir + "/ckpt", state.set_step(1), kAsync);
    if (rank == 0) cohort::finish_checkpoint_saves();
    cohort::save_checkpoint(dir + "/ckpt", state.set_step(2), kAsync);
    if (rank == 1) cohort::save_checkpoint(dir + "/alone", state.set_step(3), cohort::SaveOptions().async(true).comm(alone));
    cohort::save_checkpoint(dir + "/ckpt", state.set_step(4), kAsync);
    cohort::finish_checkpoint_saves();
    report("saved");
  }, options);
  for (const auto& r : results) EXPECT_EQ(r.reports, std::vector<std::string>{"saved"}) << r.output;
  if (cohort::testing::is_rank_process()) return;
  for (int step : {1, 2, 4}) EXPECT_TRUE(fs::exists(dir + "/ckpt/step-" + std::to_string(step) + "/manifest.json"));
  EXPECT_TRUE(fs::exists(dir + "/alone/step-3/manifest.json"));
  fs::remove_all(dir);
}

TEST(CheckpointAsync, ARankKilledDuringTheBackgroundWriteLeavesThePreviousCheckpoint) {
  RanksOptions options;
  options.expect_all_pass = false;
  options.env["COHORT_TEST_KILL_IN_SAVE"] = "1:5";  // rank 1, once its shard of step 5 is written
  const std::string dir = shared_dir(options);
  const auto results = run_ranks(2, [&](int rank, int size) {
    cohort::init();
    Model model(rank);
    cohort::CheckpointState state = state_of(model);
    cohort::save_checkpoint(dir, state.set_step(4), kAsync);
    model.weight.add_(1);
    cohort::save_checkpoint(dir, state.set_step(5), kAsync);
    try {
      cohort::finish_checkpoint_saves();
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  }, options);
  EXPECT_EQ(results[1].signal, SIGKILL);
  ASSERT_EQ(results[0].reports.size(), 1u) << results[0].output;
  EXPECT_THAT(results[0].reports[0], HasSubstr("async save_checkpoint(" + dir + "/step-5) failed"));
  EXPECT_THAT(results[0].reports[0], HasSubstr("rank 1"));
  if (cohort::testing::is_rank_process()) return;
  Model loaded(0);
  cohort::CheckpointState state = state_of(loaded);
  const auto info = cohort::load_checkpoint(dir, state);  // on one rank: resharded
  ASSERT_TRUE(info);
  EXPECT_EQ(info->step, 4);
  EXPECT_TRUE(info->skipped.empty());
  EXPECT_TRUE(loaded.weight.equal(torch::arange(1000, torch::kFloat)));
  fs::remove_all(dir);
}

}  // namespace checkpoint_async_test
