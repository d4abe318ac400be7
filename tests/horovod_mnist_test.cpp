// examples/horovod_mnist end to end on a small synthetic Fashion-MNIST: 2 ranks under Open MPI's
// mpirun and under cohortrun train the same epoch from the same seed, so rank 0 prints one test line
// under each launcher, the same up to float rounding, with a loss and accuracy well past chance (the
// synthetic labels are learnable in one epoch). mpirun is a dependency (scripts/install-deps.sh).
// Under --elastic, a rank SIGKILLed right after a commit makes cohortrun restart the group, which goes
// on from that commit to the same weights as a run that was never killed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "launch_helpers.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace horovod_mnist_test {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> example_args(const std::string& data) {
  return {build_path("/examples/horovod_mnist"), "--data-dir", data, "--epochs", "1", "--batch-size", "16",
          "--test-batch-size", "64", "--lr", "0.01", "--log-interval", "16"};
}

struct TestLine {
  std::string text;  // "Test set: Average loss: 1.4278, Accuracy: 51.56%"
  double loss = 0, accuracy = 0;
};

// The one "Test set: ..." line rank 0 prints.
TestLine test_line(const ProcResult& result) {
  const std::regex line(R"(Test set: Average loss: ([0-9.]+), Accuracy: ([0-9.]+)%)");
  std::smatch m;
  EXPECT_EQ(count_of(result.out, "Test set:"), 1u) << result.describe();
  if (!std::regex_search(result.out, m, line)) return {};
  return {m[0].str(), std::stod(m[1].str()), std::stod(m[2].str())};
}

std::string digest_of(const ProcResult& result) {
  const std::regex line(R"(params-sha256: ([0-9a-f]{64}))");
  std::smatch m;
  EXPECT_EQ(count_of(result.out, "params-sha256:"), 1u) << result.describe();
  return std::regex_search(result.out, m, line) ? m[1].str() : "";
}

// 20 steps of 2 ranks under --elastic, a commit every 4 (commits 1 to 5 at steps 4 ... 20).
ProcResult run_elastic(const std::string& data, const std::string& dir, const Env& env) {
  std::vector<std::string> argv{build_path("/tools/cohortrun"), "--standalone", "--nproc-per-node", "2",
                                "--max-restarts", "1"};
  for (const auto& arg : example_args(data)) argv.push_back(arg);
  for (const char* arg : {"--elastic", "--commit-every", "4", "--max-steps", "20", "--elastic-dir"}) argv.push_back(arg);
  argv.push_back(dir);
  return run_process(argv, env, 120s);
}

}  // namespace

TEST(HorovodMnist, ElasticRankKilledAfterACommitResumesFromIt) {
  const std::string data = make_temp_dir("horovod_mnist_elastic_");
  write_synthetic_fashion_mnist(data, 1024, 64);
  const ProcResult whole = run_elastic(data, data + "/whole", clean_env());
  ASSERT_EQ(whole.code, 0) << whole.describe();
  EXPECT_THAT(whole.out, Not(HasSubstr("on_reset"))) << whole.describe();
  // Rank 1 dies right after its second commit (step 8) returned: rank 0's file holds step 8.
  const ProcResult killed = run_elastic(data, data + "/killed", clean_env({{"COHORT_TEST_KILL_AFTER_COMMIT", "1:2"}}));
  remove_tree(data);
  ASSERT_EQ(killed.code, 0) << killed.describe();
  EXPECT_THAT(killed.err, HasSubstr("[rank0]: hvd::elastic: restored commit 2 of " + data +
                                    "/killed/hvd-elastic-state.pt (restart 1, 2 rank(s))"))
      << killed.describe();
  EXPECT_THAT(killed.out, HasSubstr("on_reset: 2 ranks, resuming at epoch 1 batch 8 (step 8)"));
  // Steps 9 to 20 trained once after the restart, and no committed step again: the same weights.
  const std::string digest = digest_of(whole);
  EXPECT_EQ(digest.size(), 64u) << whole.describe();
  EXPECT_EQ(digest_of(killed), digest) << killed.describe();
}

// --elastic-dir naming a file: one line naming the flag and the path before anything runs (it was a raw
// "filesystem error:" at rank 0's first commit, after training started).
TEST(HorovodMnist, ElasticDirThatIsAFileIsOneLineNamingTheFlag) {
  const std::string data = make_temp_dir("horovod_mnist_elastic_dir_");
  write_synthetic_fashion_mnist(data, 64, 16);
  const std::string file = data + "/a-file";
  std::ofstream(file) << "not a directory\n";
  std::vector<std::string> argv = example_args(data);
  for (const char* arg : {"--elastic", "--commit-every", "1", "--max-steps", "2", "--elastic-dir"}) argv.push_back(arg);
  argv.push_back(file);
  const ProcResult result = run_process(argv, clean_env(), 60s);
  const ProcResult empty = run_process({build_path("/examples/horovod_mnist"), "--elastic", "--elastic-dir", ""},
                                       clean_env(), 60s);
  remove_tree(data);
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_EQ(result.err, "error: --elastic-dir " + file + " is not a directory\n");
  EXPECT_EQ(empty.code, 2) << empty.describe();
  EXPECT_EQ(empty.err, "error: --elastic-dir is empty: give a directory, or leave the flag out\n");
}

TEST(HorovodMnist, SameEpochUnderMpirunAndCohortrun) {
  const std::string data = make_temp_dir("horovod_mnist_");
  write_synthetic_fashion_mnist(data, 1024, 64);
  // --bind-to none: two single-threaded ranks on a small machine should not share one core.
  std::vector<std::string> mpirun = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                                     "-np", "2"};
  for (const auto& arg : example_args(data)) mpirun.push_back(arg);
  std::vector<std::string> mpirun_argv{"/usr/bin/env"};
  mpirun_argv.insert(mpirun_argv.end(), mpirun.begin(), mpirun.end());
  const ProcResult by_mpirun = run_process(mpirun_argv, clean_env(), 120s);
  ASSERT_EQ(by_mpirun.code, 0) << by_mpirun.describe();
  std::vector<std::string> cohortrun{build_path("/tools/cohortrun"), "--standalone", "--nproc-per-node", "2"};
  for (const auto& arg : example_args(data)) cohortrun.push_back(arg);
  const ProcResult by_cohortrun = run_process(cohortrun, clean_env(), 120s);
  ASSERT_EQ(by_cohortrun.code, 0) << by_cohortrun.describe();
  remove_tree(data);

  const TestLine mpi = test_line(by_mpirun), local = test_line(by_cohortrun);
  EXPECT_FALSE(mpi.text.empty()) << by_mpirun.out;
  // The same training up to float rounding (the launchers set up threads and libraries differently).
  EXPECT_NEAR(mpi.loss, local.loss, 0.01) << mpi.text << " | " << local.text;
  EXPECT_NEAR(mpi.accuracy, local.accuracy, 3.2) << mpi.text << " | " << local.text;  // 2 of 64 images
  // It learned: chance is 10% and a loss of ln 10 = 2.30 (64 noisy test images, one short epoch).
  EXPECT_GT(mpi.accuracy, 25.0) << by_mpirun.out;
  EXPECT_LT(mpi.loss, 2.0) << by_mpirun.out;
  EXPECT_THAT(by_mpirun.out, HasSubstr("Train Epoch: 1 [0/512 (0%)]\tLoss: "));
}

}  // namespace horovod_mnist_test
