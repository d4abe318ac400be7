// The pipeline example's limits and checkpoints: --chunks against --batch-size, FSDP per stage that
// checkpoints and resumes, checkpoints of any batch that resume (and another batch refused), and an epoch
// saved at its last batch that stays over in another layout of the data. On the CPU, on small
// synthetic data, a lone process or 2 ranks under cohortrun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "launch_helpers.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace pipeline_example_test {

using ::testing::HasSubstr;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

struct Data {
  std::string root = make_temp_dir("pipeline_example_");
  explicit Data(int train, int test) { write_synthetic_fashion_mnist(root, train, test); }
  ~Data() { remove_tree(root); }
};

// The pipeline example with more microbatches than rows per batch skipped every batch, trained nothing
// and exited 0 ("steps 0").
TEST(PipelineExample, PipelineChunksAboveTheBatchAreRefused) {
  const ProcResult result = run_process(
      {build_path("/examples/pipeline"), "--data", "/nonexistent", "--chunks", "128", "--batch-size", "64"},
      clean_env(), 60s);
  EXPECT_EQ(result.code, 2) << result.describe();
  EXPECT_EQ(result.err,
            "error: --chunks 128 is more than --batch-size 64: a batch cannot be split into more "
            "microbatches than it has samples; lower --chunks or raise --batch-size\n");
}

// 2 stages x 2 replicas under FSDP per stage (--zero-stage 3): its checkpoints (the engines' state by
// parameter, Pipeline::zero_state) verify, and a resume ends with the uninterrupted run's loss.
TEST(PipelineExample, PipelineUnderFsdpPerStageCheckpointsAndResumes) {
  Data data(64, 16);
  const std::string dir = data.root + "/ck";
  auto run = [&](const std::string& steps, const std::string& checkpoints) {
    std::vector<std::string> args = {build_path("/tools/cohortrun"), "--standalone", "--nproc-per-node", "4",
                                     build_path("/examples/pipeline"), "--data", data.root, "--stages", "2",
                                     "--data-parallel", "2", "--zero-stage", "3", "--batch-size", "8", "--chunks",
                                     "4", "--epochs", "1", "--max-steps", steps, "--threads", "1"};
    for (const std::string& arg : {"--checkpoint-dir", checkpoints.c_str(), "--checkpoint-every", "1", "--resume", "auto"})
      if (!checkpoints.empty()) args.push_back(arg);
    return run_process(args, clean_env(), 120s);
  };
  const ProcResult uninterrupted = run("3", "");
  ASSERT_EQ(uninterrupted.code, 0) << uninterrupted.describe();
  const ProcResult first = run("2", dir);
  ASSERT_EQ(first.code, 0) << first.describe();
  const ProcResult verify =
      run_process({build_path("/tools/cohort_ckpt/cohort-ckpt"), "verify", dir + "/step-2"}, clean_env());
  EXPECT_EQ(verify.code, 0) << verify.describe();
  const ProcResult resumed = run("3", dir);
  ASSERT_EQ(resumed.code, 0) << resumed.describe();
  EXPECT_THAT(resumed.out, HasSubstr("resumed from " + dir + "/step-2 (step 2, saved by 4 rank(s))"));
  const auto final_loss = [](const std::string& out) {
    const size_t at = out.find("final loss ");
    return at == std::string::npos ? std::string("none") : out.substr(at, 17);
  };
  EXPECT_EQ(final_loss(resumed.out), final_loss(uninterrupted.out)) << resumed.describe() << uninterrupted.describe();
}

// Hostile pass 10, S1 and S6: the pipeline example counted a batch larger than the data as a whole
// batch, so each of its checkpoints was BAD and the resume found none; another --batch-size resumed,
// replayed samples and wrote a BAD checkpoint. Now the real samples count and the batch is kept.
TEST(PipelineExample, PipelineCheckpointsOfAnyBatchResumeAndAnotherBatchIsRefused) {
  Data data(40, 16);
  const std::string dir = data.root + "/ck";
  auto pipeline = [&](const std::string& batch, const std::string& steps) {
    return run_process({build_path("/examples/pipeline"), "--data", data.root, "--batch-size", batch, "--chunks", "2",
                        "--epochs", "3", "--max-steps", steps, "--checkpoint-dir", dir, "--checkpoint-every", "1",
                        "--resume", "auto", "--threads", "1"},
                       clean_env(), 120s);
  };
  const ProcResult first = pipeline("100", "2");  // one batch of 40 an epoch
  ASSERT_EQ(first.code, 0) << first.describe();
  for (const char* step : {"/step-1", "/step-2"}) {
    const ProcResult verify = run_process({build_path("/tools/cohort_ckpt/cohort-ckpt"), "verify", dir + step},
                                          clean_env());
    EXPECT_EQ(verify.code, 0) << verify.describe();
  }
  const ProcResult resumed = pipeline("100", "3");
  ASSERT_EQ(resumed.code, 0) << resumed.describe();
  EXPECT_THAT(resumed.out, HasSubstr("resumed from " + dir + "/step-2 (step 2, saved by 1 rank(s))"));
  // Hostile pass 19 m-1: a resume with nothing left trains no step and prints no loss of its own.
  const ProcResult again = pipeline("100", "3");
  ASSERT_EQ(again.code, 0) << again.describe();
  EXPECT_THAT(again.out, HasSubstr("steps 3 (no training in this run) test accuracy ")) << again.describe();
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-4")) << again.describe();
  // Hostile pass 19 M-1: a launcher's restart with --resume never starts from step 0, and says so.
  const ProcResult restart =
      run_process({build_path("/examples/pipeline"), "--data", data.root, "--batch-size", "100", "--chunks", "2",
                   "--epochs", "3", "--max-steps", "1", "--resume", "never", "--threads", "1"},
                  clean_env({{"TORCHELASTIC_RESTART_COUNT", "1"}}), 120s);
  ASSERT_EQ(restart.code, 0) << restart.describe();
  EXPECT_THAT(restart.out, HasSubstr("restart 1 of this job (TORCHELASTIC_RESTART_COUNT): --resume never starts it "
                                     "again from step 0; this example continues a restart from the newest checkpoint "
                                     "in --checkpoint-dir only with --resume auto"))
      << restart.describe();
  const ProcResult other = pipeline("16", "4");
  EXPECT_EQ(other.code, 1) << other.describe();
  EXPECT_THAT(other.err,
              HasSubstr("the checkpoint " + dir +
                        "/step-3 was saved with a global batch of 100 samples, "
                        "this run has 16 (--batch-size x --data-parallel): keep the global batch to resume"));
}

// Hostile pass 12, M-3: saved at the last batch of an epoch whose tail was too small for --chunks (2
// replicas of 26: 16 trained, 10 dropped), resumed on 1 replica of 32 (a tail of 19 that trains), the
// finished epoch was re-opened for a step. The saved epoch's batch count says it is over.
TEST(PipelineExample, PipelineResumedAtAnEpochsLastBatchStartsTheNextInAnotherLayout) {
  Data data(51, 16);
  const std::string dir = data.root + "/ck";
  const std::vector<std::string> common = {build_path("/examples/pipeline"), "--data", data.root, "--chunks", "12",
                                           "--epochs", "2", "--checkpoint-dir", dir, "--checkpoint-every", "1",
                                           "--threads", "1"};
  std::vector<std::string> two = {build_path("/tools/cohortrun"), "--standalone", "--nproc-per-node", "2"};
  two.insert(two.end(), common.begin(), common.end());
  for (const char* arg : {"--data-parallel", "2", "--batch-size", "16", "--max-steps", "1"}) two.push_back(arg);
  const ProcResult first = run_process(two, clean_env(), 120s);
  ASSERT_EQ(first.code, 0) << first.describe();
  std::vector<std::string> one = common;
  for (const char* arg : {"--data-parallel", "1", "--batch-size", "32", "--max-steps", "2"}) one.push_back(arg);
  const ProcResult resumed = run_process(one, clean_env(), 120s);
  ASSERT_EQ(resumed.code, 0) << resumed.describe();
  std::ifstream manifest(dir + "/step-2/manifest.json");
  std::stringstream text;
  text << manifest.rdbuf();
  EXPECT_THAT(text.str(), ::testing::ContainsRegex("\"epoch\": 1(\\.0)?,"));  // step 2 is epoch 1's first
  EXPECT_THAT(text.str(), ::testing::ContainsRegex("\"samples_in_epoch\": 32(\\.0)?,"));
}

}  // namespace

}  // namespace pipeline_example_test
