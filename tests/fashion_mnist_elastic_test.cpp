// The program's side of an elastic restart (docs/cohortrun.md "Elastic jobs"), on the Fashion-MNIST
// example under cohortrun with a small synthetic data set: a restarted group resumes by itself from
// the newest checkpoint (TORCHELASTIC_RESTART_COUNT > 0), even under --resume never, and ends with
// the digest of a run never interrupted; a checkpoint of 4 ranks resumes on 2 with each step
// accumulating 2 batches, keeping the samples per step; a world whose batch does not divide them is
// refused by name when resumed by hand, and goes on with its own batch, saying so, on a launcher's
// restart. No timing is asserted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "launch_helpers.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace fashion_mnist_elastic_test {

using ::testing::HasSubstr;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kTrain = 512, kTest = 64;

struct Job {
  std::string root = make_temp_dir("fashion_mnist_elastic_");
  std::string ckpt = root + "/ckpt";
  Job() { write_synthetic_fashion_mnist(root, kTrain, kTest); }
  ~Job() { remove_tree(root); }
  // cohortrun with `ranks` workers running fashion_mnist on the data, batch 8 per rank, then `extra`.
  std::vector<std::string> argv(int ranks, const std::vector<std::string>& extra, int restarts = 1) const {
    std::vector<std::string> args = {build_path("/tools/cohortrun"), "--standalone", "--nproc-per-node",
                                     std::to_string(ranks), "--max-restarts", std::to_string(restarts),
                                     "--stop-timeout", "5",
                                     build_path("/examples/fashion_mnist"), "--data", root, "--batch-size", "8",
                                     "--threads", "1", "--progress", "off"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

// "0.6766" from rank 0's "epoch 1/2: train loss 0.6766, ..." line; "" when there is none.
std::string train_loss_of(const std::string& out) {
  const std::string key = "[rank0]: epoch 1/2: train loss ";
  const size_t at = out.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  return out.substr(begin, out.find(',', begin) - begin);
}

}  // namespace

// Rank 1 dies in the save of step 10 (first attempt only); cohortrun restarts the group, and although
// --resume never says to start from scratch, the restart continues from step-5: the digest is that
// of the run never interrupted, so no step entered the weights twice, and so is the epoch's train loss.
TEST(FashionMnistElastic, RestartResumesByItselfToTheSameParameters) {
  Job job;
  const ProcResult whole = run_process(job.argv(2, {"--max-steps", "16"}), clean_env(), 120s);
  ASSERT_EQ(whole.code, 0) << whole.describe();
  const std::string expected = params_digest_of(whole.out);
  ASSERT_EQ(expected.size(), 64u) << whole.describe();
  const ProcResult result = run_process(job.argv(2, {"--max-steps", "16", "--checkpoint-dir", job.ckpt,
                                                     "--checkpoint-every", "5", "--resume", "never"}),
                                        clean_env({{"COHORT_TEST_KILL_IN_SAVE", "1:10"}}), 120s);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("[rank0]: restart 1 of this job (TORCHELASTIC_RESTART_COUNT): continuing from "
                                    "the newest checkpoint it saved in " + job.ckpt + "\n"));
  EXPECT_THAT(result.out, HasSubstr("[rank0]: resumed from " + job.ckpt + "/step-5 (step 5, saved by 2 rank(s))"));
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
  // The epoch's train loss counts steps 1-5 too (the checkpoint's logged sums): it was the mean of steps
  // 6-16 alone, another number than the uninterrupted run's with the same parameters.
  const std::string loss = train_loss_of(whole.out);
  ASSERT_EQ(loss.size(), 6u) << whole.describe();
  EXPECT_EQ(train_loss_of(result.out), loss) << result.describe();
}

// 4 ranks save step-4 (32 samples per step); 2 ranks resume from it accumulating 2 batches of 8 per
// rank and train to step 8. 3 ranks (24 per batch) cannot keep 32: resumed by hand (the first attempt)
// they are refused by name; cohortrun's restart then goes on with 24 per step and says so, skipping the
// 8 samples that reach a whole batch of 24 (256 of the epoch were trained).
TEST(FashionMnistElastic, FewerRanksKeepTheSamplesPerStepByAccumulating) {
  Job job;
  const auto run = [&](int ranks, const std::string& steps, int restarts) {
    return run_process(
        job.argv(ranks, {"--max-steps", steps, "--checkpoint-dir", job.ckpt, "--checkpoint-every", "4"}, restarts),
        clean_env(), 120s);
  };
  const ProcResult four = run(4, "4", 0);
  ASSERT_EQ(four.code, 0) << four.describe();
  const ProcResult two = run(2, "8", 0);
  ASSERT_EQ(two.code, 0) << two.describe();
  EXPECT_THAT(two.out, HasSubstr("[rank0]: resumed from " + job.ckpt + "/step-4 (step 4, saved by 4 rank(s))"));
  EXPECT_THAT(two.out, HasSubstr("[rank0]: world size 4 -> 2: each optimizer step accumulates 2 batches of 8 "
                                 "samples per rank, keeping the checkpoint's 32 samples per step\n"));
  EXPECT_THAT(two.out, HasSubstr("[rank0]: stopped after 8 steps (--max-steps)"));
  const ProcResult three = run(3, "12", 1);
  ASSERT_EQ(three.code, 0) << three.describe();
  EXPECT_THAT(three.err, HasSubstr("the checkpoint " + job.ckpt + "/step-8 was saved with 32 samples per optimizer "
                                   "step by 2 rank(s); this run's 3 rank(s) take 24 per batch (batch_size x ranks), "
                                   "and it does not divide them: choose a batch size that keeps the global batch"));
  EXPECT_THAT(three.out, HasSubstr("[rank0]: world size 2 -> 3: the checkpoint's 32 samples per optimizer step cannot "
                                   "be kept (24 per batch, batch_size x ranks; it does not divide them): steps take "
                                   "24 samples from here; 8 samples of this epoch are skipped\n"));
  EXPECT_THAT(three.out, HasSubstr("[rank0]: stopped after 12 steps (--max-steps)"));
}

// Hostile pass 11, S-d: ZeRO accumulating 2 micro-batches (a ds_config), 2 ranks save step-2 (64
// samples); 3 ranks cannot keep 32 per step and go on with 48 (24 per batch, 2 batches). Resumed at a
// whole batch (72: 3 batches) the loop's window and the engine's disagreed and every restart failed;
// the epoch now resumes at a whole step (96).
TEST(FashionMnistElastic, ZeroWithAccumulationResumesAtAWholeStepOfTheNewWorld) {
  Job job;
  const std::string config = job.root + "/ds_config.json";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,)"
                        << R"( "zero_optimization": {"stage": 2}})";
  const auto run = [&](int ranks, const std::string& steps, int restarts) {
    return run_process(job.argv(ranks,
                                {"--deepspeed-config", config, "--max-steps", steps, "--checkpoint-dir", job.ckpt,
                                 "--checkpoint-every", "1"},
                                restarts),
                       clean_env(), 120s);
  };
  const ProcResult two = run(2, "2", 0);
  ASSERT_EQ(two.code, 0) << two.describe();
  const ProcResult three = run(3, "4", 1);
  ASSERT_EQ(three.code, 0) << three.describe();
  EXPECT_THAT(three.out, HasSubstr("steps take 48 samples from here; 32 samples of this epoch are skipped\n"));
  EXPECT_THAT(three.out, HasSubstr("[rank0]: stopped after 4 steps (--max-steps)"));
}

// Hostile pass 5, M1: every stage of a pipeline logs its loss, so the saved epoch sums count each
// sample once per stage; resumed at another world size rank 0 took them all, and the epoch's train
// loss counted the steps before the save twice (2 -> 1) or the steps after it twice (1 -> 2).
TEST(FashionMnistElastic, APipelineResumedAtAnotherWorldSizePrintsTheUninterruptedLoss) {
  Job job;
  const auto run = [&](int ranks, const std::string& steps, const std::string& ckpt) {
    std::vector<std::string> extra = {"--strategy", "pipeline", "--epochs", "2", "--max-steps", steps};
    if (!ckpt.empty()) extra.insert(extra.end(), {"--checkpoint-dir", ckpt, "--checkpoint-every", "3"});
    return run_process(job.argv(ranks, extra, 0), clean_env(), 120s);
  };
  const ProcResult whole = run(2, "64", "");  // 64 batches of 8: the first epoch, whole
  ASSERT_EQ(whole.code, 0) << whole.describe();
  const std::string loss = train_loss_of(whole.out);
  ASSERT_EQ(loss.size(), 6u) << whole.describe();
  for (const auto& [saved, resumed] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const std::string ckpt = job.ckpt + "-" + std::to_string(saved);
    const ProcResult first = run(saved, "3", ckpt);
    ASSERT_EQ(first.code, 0) << first.describe();
    const ProcResult second = run(resumed, "64", ckpt);
    ASSERT_EQ(second.code, 0) << second.describe();
    EXPECT_THAT(second.out, HasSubstr("[rank0]: resumed from " + ckpt + "/step-3"));
    EXPECT_EQ(train_loss_of(second.out), loss) << saved << " -> " << resumed << "\n" << second.describe();
  }
}

// Resumed on more ranks at the last step of an epoch, only rank 0 took the saved epoch sums: the epoch's
// end ran its means' collective on rank 0 alone (a desync naming the program). The other ranks hold the
// synchronized names at zero, and the epoch's loss is the uninterrupted run's.
TEST(FashionMnistElastic, MoreRanksResumedAtAnEpochsLastStepEndItTogether) {
  Job job;
  // 1 rank x batch 8 and 2 ranks x batch 4 take the same 8 samples per step: 64 steps an epoch.
  const auto run = [&](int ranks, const std::string& batch, const std::string& steps, const std::string& ckpt) {
    std::vector<std::string> extra = {"--epochs", "2", "--max-steps", steps};
    // Every 64 steps: step 64 is saved after its batch, before the epoch's end ran.
    if (!ckpt.empty()) extra.insert(extra.end(), {"--checkpoint-dir", ckpt, "--checkpoint-every", "64"});
    auto args = job.argv(ranks, extra, 0);
    *(std::find(args.begin(), args.end(), "--batch-size") + 1) = batch;
    return run_process(args, clean_env(), 120s);
  };
  const ProcResult whole = run(1, "8", "65", "");
  ASSERT_EQ(whole.code, 0) << whole.describe();
  const std::string loss = train_loss_of(whole.out);
  ASSERT_EQ(loss.size(), 6u) << whole.describe();
  const ProcResult first = run(1, "8", "64", job.ckpt);
  ASSERT_EQ(first.code, 0) << first.describe();
  const ProcResult second = run(2, "4", "65", job.ckpt);
  ASSERT_EQ(second.code, 0) << second.describe();
  EXPECT_THAT(second.out, HasSubstr("[rank0]: resumed from " + job.ckpt + "/step-64 (step 64, saved by 1 rank(s))"));
  EXPECT_EQ(train_loss_of(second.out), loss) << second.describe();
}

}  // namespace fashion_mnist_elastic_test
