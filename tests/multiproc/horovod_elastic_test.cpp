// hvd::elastic on 2 ranks: a State syncs rank 0's model, optimizer state and values; commit() persists
// them (rank 0's file) and restore() brings them back; run() in a restarted process resumes from the
// directory's commit and calls the reset callbacks, which see the world's size; a peer that dies inside
// fn makes run() end the process with kRestartExitCode. The restart by cohortrun itself is
// horovod_mnist_test's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cohort/horovod.h"
#include "compat/optimizer_state.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace horovod_elastic_test {

namespace hvd = cohort::hvd;
using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

struct Parts {
  std::shared_ptr<torch::nn::LinearImpl> model;
  std::shared_ptr<torch::optim::SGD> optimizer;
};

// A model and an SGD with momentum that took one local step: different on every rank.
Parts make_parts(int seed) {
  torch::manual_seed(seed);
  Parts parts{std::make_shared<torch::nn::LinearImpl>(3, 2), nullptr};
  parts.optimizer = std::make_shared<torch::optim::SGD>(parts.model->parameters(),
                                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  parts.model->forward(torch::ones({4, 3})).sum().backward();
  parts.optimizer->step();
  return parts;
}

// Whether every rank holds the same `tensor` (its Sum over ranks is size() times it).
bool same_on_every_rank(const torch::Tensor& tensor, const std::string& name) {
  return torch::allclose(hvd::allreduce(tensor.detach(), name, hvd::Sum), tensor * hvd::size());
}

torch::Tensor momentum_of(torch::optim::SGD& optimizer) {
  auto* state = cohort::detail::find_param_state(optimizer, optimizer.param_groups()[0].params()[0]);
  return static_cast<torch::optim::SGDParamState&>(*state).momentum_buffer();
}

cohort::testing::RanksOptions with_dir(cohort::testing::RanksOptions options = {}) {
  cohort::testing::shared_temp_dir(options, "COHORT_HVD_ELASTIC_DIR", "horovod_elastic_");
  return options;
}

}  // namespace

TEST(HvdElastic, StateSyncsCommitsAndRestores) {
  run_ranks(2, [](int rank, int) {
    hvd::init();
    auto parts = make_parts(rank);
    hvd::elastic::State state(parts.model, parts.optimizer, {{"epoch", int64_t(1)}, {"batch", int64_t(10 + rank)}});
    state.sync();  // rank 0's weights, momentum and values everywhere
    EXPECT_TRUE(same_on_every_rank(parts.model->weight, "weight"));
    EXPECT_TRUE(same_on_every_rank(momentum_of(*parts.optimizer), "momentum"));
    EXPECT_EQ(state["batch"].toInt(), 10);
    state["batch"] = int64_t(20);
    torch::NoGradGuard no_grad;
    parts.model->weight.add_(1.0);
    const auto committed = parts.model->weight.clone();
    // What a commit killed before its rename left is removed by the first commit (hostile pass 16, M-2).
    const std::filesystem::path path(state.path());
    const std::string stale = (path.parent_path() / ("." + path.filename().string() + ".Ab12Cd.tmp")).string();
    if (rank == 0) std::ofstream(stale) << "half a commit";
    state.commit();
    EXPECT_EQ(state.commits(), 1);
    EXPECT_TRUE(std::filesystem::is_regular_file(state.path())) << state.path();
    EXPECT_FALSE(std::filesystem::exists(stale)) << stale;
    state["batch"] = int64_t(30);
    parts.model->weight.add_(1.0);
    state.restore();
    EXPECT_EQ(state["batch"].toInt(), 20);
    EXPECT_TRUE(torch::equal(parts.model->weight, committed));
    const std::string me = "[rank " + std::to_string(rank) + "/2] ";
    EXPECT_EQ(error_of([&] { state["step"]; }),
              me + "hvd::elastic::State['step']: no such value; the State was made with: epoch, batch");
    hvd::shutdown();
  }, with_dir());
}

// A first State commits batch 7; then, as a restarted process would, run() with a fresh model restores
// it (rank 0 reads the file, sync() gives it to rank 1) and calls the reset callback before fn.
TEST(HvdElastic, RunResumesFromTheCommitAndCallsTheResetCallbacks) {
  run_ranks(2, [](int rank, int) {
    hvd::init();
    auto first = make_parts(rank);
    hvd::elastic::State before(first.model, first.optimizer, {{"batch", int64_t(0)}});
    before.sync();
    before["batch"] = int64_t(7);
    before.commit();
    const auto committed = first.model->weight.clone();
    ::setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
    auto fresh = make_parts(100 + rank);
    hvd::elastic::State state(fresh.model, fresh.optimizer, {{"batch", int64_t(0)}});
    int resets = 0, size_seen = 0;
    state.register_reset_callbacks({[&] { ++resets; }, [&] { size_seen = hvd::size(); }});
    bool ran = false;
    hvd::elastic::run(state, [&](hvd::elastic::State& s) {
      ran = true;
      EXPECT_EQ(resets, 1);  // before fn
      EXPECT_EQ(s["batch"].toInt(), 7);
      EXPECT_EQ(s.commits(), 1);
      EXPECT_TRUE(torch::equal(fresh.model->weight, committed));
    });
    EXPECT_TRUE(ran);
    EXPECT_EQ(size_seen, 2);
    hvd::shutdown();
  }, with_dir());
}

// Rank 1 dies inside fn; rank 0's next allreduce fails naming it, and run() exits with code 75.
TEST(HvdElastic, APeerDyingInsideRunEndsTheProcessForARestart) {
  auto options = with_dir();
  options.env["COHORT_TIMEOUT"] = "60";
  options.expect_all_pass = false;
  const auto results = run_ranks(2, [](int rank, int) {
    hvd::init();
    auto parts = make_parts(rank);
    hvd::elastic::State state(parts.model, parts.optimizer);
    hvd::elastic::run(state, [&](hvd::elastic::State&) {
      if (rank == 1) ::kill(::getpid(), SIGKILL);
      for (int i = 0; i < 1000; ++i) hvd::allreduce(torch::ones({1 << 16}), "grad");
    });
    ADD_FAILURE() << "run() returned";
  }, options);
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_EQ(results[0].exit_code, hvd::elastic::kRestartExitCode) << results[0].output;
  EXPECT_THAT(results[0].output, HasSubstr("rank 1 (group rank 1 of 'hvd') died"));
  EXPECT_THAT(results[0].output, HasSubstr("hvd::elastic::run: exiting with code 75 so that the launcher restarts "
                                           "every rank from the last commit (cohortrun --max-restarts)"));
}

}  // namespace horovod_elastic_test
