// End to end: the Fashion-MNIST example under `cohortrun --max-restarts 2` with checkpoints. A
// worker SIGKILLed mid-epoch, or killed in the middle of a save, makes cohortrun restart the group;
// the workers resume from the latest good checkpoint (--resume auto) and the run ends with the same
// params-sha256 as a run never interrupted. The data is a small synthetic set in IDX files so that
// three epochs take seconds. No timing is asserted: the kill waits for the first checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "launch_helpers.h"
#include "support/multiproc.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_e2e_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kTrain = 512, kTest = 64;  // 16 steps per epoch at 2 ranks x 16

struct Job {
  std::string root = make_temp_dir("checkpoint_e2e_");
  Job() { write_synthetic_fashion_mnist(root, kTrain, kTest); }
  ~Job() { remove_tree(root); }
  /// `launcher`: cohortrun's rendezvous flags, --standalone (a fresh run id per launch) when none.
  std::vector<std::string> argv(const std::vector<std::string>& extra,
                                const std::vector<std::string>& launcher = {"--standalone"}) const {
    std::vector<std::string> args = {build_path("/tools/cohortrun"), "--nproc-per-node", "2", "--max-restarts", "2"};
    args.insert(args.end(), launcher.begin(), launcher.end());
    for (const std::string& arg : {build_path("/examples/fashion_mnist"), std::string("--data"), root,
                                   std::string("--epochs"), std::string("3"), std::string("--batch-size"),
                                   std::string("16"), std::string("--threads"), std::string("1"),
                                   std::string("--progress"), std::string("off")})
      args.push_back(arg);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

// Pids of processes whose parent is `parent` and whose environment has RANK=<rank>.
std::vector<pid_t> workers_of(pid_t parent, int rank) {
  std::vector<pid_t> out;
  for (const auto& item : fs::directory_iterator("/proc")) {
    const std::string name = item.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(item.path() / "stat");
    std::string all;
    std::getline(stat, all);
    const auto close = all.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(all.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream environ(item.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    if (env.find(std::string("RANK=") + std::to_string(rank) + '\0') != std::string::npos &&
        (env.rfind("RANK=", 0) == 0 || env.find(std::string("\0RANK=", 6)) != std::string::npos)) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

std::string reference_digest(const Job& job) {
  static std::string digest;  // the same for every test: compute it once
  if (digest.empty()) {
    const ProcResult result = run_process(job.argv({}), clean_env(), 120s);
    EXPECT_EQ(result.code, 0) << result.describe();
    digest = params_digest_of(result.out);
  }
  return digest;
}

// Attempt `restart` of a 2-rank job as torchrun's agent starts it (its environment set by hand, the
// agent's per-launch log directory `logs`); rank 0's result. `rank1_restart`: rank 1's count where its
// node's agent counts otherwise (torchrun counts per node).
ProcResult run_as_torchrun(const std::vector<std::string>& argv, int restart, const std::string& logs,
                           int rank1_restart = -1, const Env& inherited = {}) {
  const std::string port = std::to_string(free_port());
  std::vector<Proc> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string attempt = std::to_string(rank == 1 && rank1_restart >= 0 ? rank1_restart : restart);
    Env env = {{"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"},
                         {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "0"}, {"GROUP_WORLD_SIZE", "1"},
                         {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"TORCHELASTIC_RESTART_COUNT", attempt},
                         {"TORCHELASTIC_MAX_RESTARTS", "1"}, {"TORCHELASTIC_RUN_ID", "none"},
                         {"TORCHELASTIC_ERROR_FILE",
                          logs + "/attempt_" + attempt + "/" + std::to_string(rank) + "/error.json"}};
    env.insert(inherited.begin(), inherited.end());
    ranks.push_back(start_process(argv, clean_env(env)));
  }
  const ProcResult result = finish_process(ranks[0], 180s);
  finish_process(ranks[1], 60s);
  return result;
}

// fashion_mnist as a torchrun-started job saving to `ckpt` (--resume never), and its attempt 0, which saves
// step-5 and step-7 and stops.
std::vector<std::string> torchrun_program(const Job& job, const std::string& ckpt) {
  return {build_path("/examples/fashion_mnist"), "--data", job.root, "--epochs", "3", "--batch-size", "16",
          "--threads", "1", "--progress", "off", "--checkpoint-dir", ckpt, "--resume", "never"};
}

void run_first_attempt_to_step_7(std::vector<std::string> program, const std::string& logs) {
  for (const char* arg : {"--max-steps", "7", "--checkpoint-every", "5"}) program.push_back(arg);
  const ProcResult attempt = run_as_torchrun(program, 0, logs);
  ASSERT_EQ(attempt.code, 0) << attempt.describe();
}

}  // namespace

TEST(CheckpointE2E, WorkerKilledMidEpochResumesToTheSameParameters) {
  Job job;
  const std::string expected = reference_digest(job);
  ASSERT_EQ(expected.size(), 64u);
  const std::string ckpt = job.root + "/ckpt";
  Proc proc = start_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "5"}), clean_env());
  // Once the first checkpoint exists, SIGKILL rank 1 (a step multiple of 5 below 48 is never the
  // last of an epoch of 16 steps, so the resume lands mid-epoch).
  bool killed = false;
  for (int i = 0; i < 6000 && !killed; ++i) {
    if (fs::exists(ckpt + "/latest")) {
      for (pid_t pid : workers_of(proc.pid, 1)) killed = ::kill(pid, SIGKILL) == 0;
    }
    if (!killed) std::this_thread::sleep_for(10ms);
  }
  const ProcResult result = finish_process(proc, 180s);
  ASSERT_TRUE(killed) << result.describe();
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("resumed from " + ckpt + "/step-")) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
  EXPECT_TRUE(fs::exists(ckpt + "/step-48/manifest.json"));  // the step count went on, too
}

TEST(CheckpointE2E, WorkerKilledDuringASaveResumesFromThePreviousCheckpoint) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  // Rank 1 dies right after writing its shard of step 10, in the first attempt only.
  const ProcResult result =
      run_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "5"}),
                  clean_env({{"COHORT_TEST_KILL_IN_SAVE", "1:10"}}), 180s);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("resumed from " + ckpt + "/step-5 (step 5, saved by 2 rank(s))"))
      << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
  EXPECT_FALSE(fs::exists(ckpt + "/.step-10.tmp"));  // the next save of step 10 cleaned it up
  EXPECT_TRUE(fs::exists(ckpt + "/step-48/manifest.json"));
}

// Async saves (--async-checkpoint): the same digest as synchronous ones, and rank 1 killed in the
// background write of step 10 (its shard written, the step not committed) resumes from step 5.
TEST(CheckpointE2E, AWorkerKilledDuringABackgroundWriteResumesFromThePreviousCheckpoint) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  const ProcResult result =
      run_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "5", "--async-checkpoint"}),
                  clean_env({{"COHORT_TEST_KILL_IN_SAVE", "1:10"}, {"COHORT_LOG_LEVEL", "info"}}), 180s);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("resumed from " + ckpt + "/step-5 (step 5, saved by 2 rank(s))"))
      << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
  EXPECT_THAT(result.err, HasSubstr("/step-5): snapshot of ")) << result.describe();
  EXPECT_THAT(result.err, HasSubstr("writing in the background")) << result.describe();
  EXPECT_TRUE(fs::exists(ckpt + "/step-48/manifest.json"));  // the fit's end waited for its last write
}

// Issue 39: rank 1 dies in the save of step 24, so the group resumes from step-16, saved at the last
// step of the first epoch (before the epoch's end ran). That resume failed with `map::at` on every
// restart; now the epoch ends as it would have (its loss from the sums the checkpoint carries) and the
// run ends at the uninterrupted digest, its epoch lines the same.
TEST(CheckpointE2E, AResumeFromTheLastStepOfAnEpochEndsAtTheSameParameters) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  const ProcResult result = run_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "8"}),
                                        clean_env({{"COHORT_TEST_KILL_IN_SAVE", "1:24"}}), 180s);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("resumed from " + ckpt + "/step-16 (step 16, saved by 2 rank(s))"))
      << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
  EXPECT_EQ(count_of(result.out, "epoch 1/3: train loss "), 2u) << result.describe();  // before and after
}

// Issue 39: a second job on the checkpoint directory of a running one is refused in one line naming
// the holder, instead of the two overwriting each other's steps; the first job ends as it would alone.
TEST(CheckpointE2E, ASecondJobOnTheSameCheckpointDirectoryIsRefused) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  Proc first = start_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "1"}), clean_env());
  for (int i = 0; i < 6000 && !fs::exists(ckpt + "/latest"); ++i) std::this_thread::sleep_for(10ms);
  const ProcResult second = run_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "1", "--resume",
                                                  "never"}),
                                        clean_env(), 180s);
  const ProcResult result = finish_process(first, 180s);
  EXPECT_NE(second.code, 0) << second.describe();
  EXPECT_THAT(second.err, ::testing::ContainsRegex("checkpoint directory " + ckpt +
                                                   " is in use by another job \\(host [^,]+, pid [0-9]+ holds " + ckpt +
                                                   "/.lock\\): give this job a directory of its own, or stop the other one"))
      << second.describe();
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
}

// Hostile pass 14, S-2: a job started from scratch (--resume never) in a directory that holds an
// earlier job's checkpoint, its rank 1 killed in its first save, is restarted from scratch, not from
// the earlier job's step (another learning rate there: its weights were printed as this job's).
// Hostile pass 15, S-1: even when both jobs have the same run id (a reused --rdzv-id; torchrun's
// default "none"): the job's token in the directory tells them apart.
TEST(CheckpointE2E, ARestartOfAJobStartedFromScratchIgnoresAnEarlierJobsCheckpoints) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  const auto same_run = [] { return std::vector<std::string>{"--master-port", std::to_string(free_port()), "--rdzv-id", "nightly"}; };
  const ProcResult earlier = run_process(
      job.argv({"--checkpoint-dir", ckpt, "--max-steps", "16", "--lr", "0.003"}, same_run()), clean_env(), 180s);
  ASSERT_EQ(earlier.code, 0) << earlier.describe();
  ASSERT_TRUE(fs::exists(ckpt + "/step-16/manifest.json"));
  const ProcResult result =
      run_process(job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "5", "--resume", "never"}, same_run()),
                  clean_env({{"COHORT_TEST_KILL_IN_SAVE", "1:5"}}), 180s);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("restart 1 of this job (TORCHELASTIC_RESTART_COUNT): " + ckpt +
                                    " holds no checkpoint this job saved: starting from scratch"))
      << result.describe();
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("resumed from"))) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
}

// Hostile pass 16, S-1: a restart whose first attempt died before training (before it could write the
// directory's .job) read an earlier job's token there and continued that job's checkpoint. torchrun's
// agent keeps one log directory per launch (TORCHELASTIC_ERROR_FILE names it), so the restart knows its
// launch, which no earlier checkpoint carries. The restart is run here as torchrun starts one (its
// environment set by hand: attempt 0 never got as far as the Trainer).
TEST(CheckpointE2E, ARestartWhoseFirstAttemptDiedBeforeTrainingContinuesNoEarlierJob) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  const std::vector<std::string> program = {build_path("/examples/fashion_mnist"), "--data", job.root, "--epochs",
                                            "3", "--batch-size", "16", "--threads", "1", "--progress", "off",
                                            "--checkpoint-dir", ckpt};
  // Self-launched, with a COHORT_LAUNCH_ID copied into the environment, which the restart inherits too
  // (hostile pass 18, S-1: it outranked torchrun's per-launch directory, so both looked one launch).
  const Env inherited = {{"COHORT_LAUNCH_ID", "copied-from-a-script"}};
  std::vector<std::string> earlier = program;
  for (const char* arg : {"--devices", "2", "--max-steps", "16", "--lr", "0.003"}) earlier.push_back(arg);
  const ProcResult first = run_process(earlier, clean_env(inherited), 180s);
  ASSERT_EQ(first.code, 0) << first.describe();
  std::vector<std::string> restart = program;
  for (const char* arg : {"--resume", "never"}) restart.push_back(arg);
  const ProcResult result = run_as_torchrun(restart, 1, job.root + "/torchelastic_x1/none_y2", -1, inherited);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("holds no checkpoint this job saved: starting from scratch")) << result.describe();
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("resumed from"))) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
}

// Hostile pass 16, M-1: a restart whose own checkpoints are all damaged (a shard's bytes flipped) starts
// where its first attempt did, as one that saved none; it failed on every restart.
TEST(CheckpointE2E, ARestartWhoseOwnCheckpointsAreAllDamagedStartsAgain) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt", logs = job.root + "/torchelastic_a1/none_b2";
  const std::vector<std::string> program = torchrun_program(job, ckpt);
  ASSERT_NO_FATAL_FAILURE(run_first_attempt_to_step_7(program, logs));
  for (const char* step : {"/step-5", "/step-7"}) {
    std::fstream shard(ckpt + step + "/shard-00000-of-00002.bin", std::ios::in | std::ios::out | std::ios::binary);
    shard.seekp(200);
    shard.put('\x5a');
  }
  const ProcResult result = run_as_torchrun(program, 1, logs);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("none of the checkpoints this job saved in " + ckpt +
                                    " is usable (no usable checkpoint in " + ckpt))
      << result.describe();
  EXPECT_THAT(result.out, HasSubstr("): starting from scratch, as its first attempt did")) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
}

// Hostile pass 17, S-1 and S-2: a launch whose text has a comma (torchrun's log directory under
// --rdzv-id exp,lr3) was split apart in the recorded list, so the restart never found its own
// checkpoints; and torchrun counts restarts per node, so a node whose worker did not fail says 0 while
// the other says 1: the ranks took different paths (one loading, one from scratch) and failed.
TEST(CheckpointE2E, ARestartUnderTorchrunContinuesWhateverItsLogDirectoryAndNodeCounts) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt", logs = job.root + "/torchelastic_a1/exp,lr3_b2";
  const std::vector<std::string> program = torchrun_program(job, ckpt);
  ASSERT_NO_FATAL_FAILURE(run_first_attempt_to_step_7(program, logs));
  const ProcResult result = run_as_torchrun(program, 1, logs, /*rank1_restart=*/0);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("continuing from the newest checkpoint it saved in " + ckpt)) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("resumed from " + ckpt + "/step-7")) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
}

// Hostile pass 15, S-3: a job started from a given checkpoint (--resume DIR/step-16) and killed in a
// later save continues from the newest checkpoint it saved itself, not from step 16 again (every
// restart went back there, losing the steps since).
TEST(CheckpointE2E, ARestartOfAJobStartedFromAGivenCheckpointContinuesFromItsOwnNewerOne) {
  Job job;
  const std::string expected = reference_digest(job);
  const std::string ckpt = job.root + "/ckpt";
  const ProcResult earlier = run_process(job.argv({"--checkpoint-dir", ckpt, "--max-steps", "16"}), clean_env(), 180s);
  ASSERT_EQ(earlier.code, 0) << earlier.describe();
  const ProcResult result = run_process(
      job.argv({"--checkpoint-dir", ckpt, "--checkpoint-every", "5", "--resume", ckpt + "/step-16"}),
      clean_env({{"COHORT_TEST_KILL_IN_SAVE", "1:25"}}), 180s);
  ASSERT_EQ(result.code, 0) << result.describe();
  EXPECT_THAT(result.out, HasSubstr("restart 1 of this job (TORCHELASTIC_RESTART_COUNT): continuing from the "
                                    "newest checkpoint it saved in " +
                                    ckpt + ", not from " + ckpt + "/step-16"))
      << result.describe();
  EXPECT_THAT(result.out, HasSubstr("resumed from " + ckpt + "/step-20")) << result.describe();
  EXPECT_EQ(params_digest_of(result.out), expected) << result.describe();
}

// Hostile pass 14, m-2: a finished job's command run again resumes at its last step, trains nothing and
// does not save that step again (each replacement of a step was a window for S-1).
TEST(CheckpointE2E, AFinishedJobRunAgainSavesItsLastStepNoMore) {
  Job job;
  const std::string ckpt = job.root + "/ckpt";
  const std::vector<std::string> args = {"--checkpoint-dir", ckpt, "--max-steps", "16"};
  const ProcResult first = run_process(job.argv(args), clean_env(), 180s);
  ASSERT_EQ(first.code, 0) << first.describe();
  // Hostile pass 16, M-2: what a save killed at the run's end leaves is removed when the job starts
  // again, though the run saves nothing more (a step's replaced copy, a pointer's temporary).
  fs::create_directory(ckpt + "/.step-16.tmp");
  std::ofstream(ckpt + "/.latest.Ab12Cd.tmp") << "step-16";
  std::ofstream(ckpt + "/.notes.tmp") << "the user's";  // not cohort's: kept (hostile pass 17, m-1)
  const ProcResult again = run_process(job.argv(args), clean_env(), 180s);
  EXPECT_FALSE(fs::exists(ckpt + "/.step-16.tmp"));
  EXPECT_FALSE(fs::exists(ckpt + "/.latest.Ab12Cd.tmp"));
  EXPECT_TRUE(fs::exists(ckpt + "/.notes.tmp"));
  ASSERT_EQ(again.code, 0) << again.describe();
  EXPECT_THAT(again.out, HasSubstr("resumed from " + ckpt + "/step-16")) << again.describe();
  EXPECT_THAT(again.out + again.err, ::testing::Not(HasSubstr("already existed"))) << again.describe();
  EXPECT_EQ(params_digest_of(again.out), params_digest_of(first.out)) << again.describe();
}

}  // namespace checkpoint_e2e_test
