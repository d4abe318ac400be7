// The Fashion-MNIST example refuses what makes no sense, and says so in one line (issue 17 items 3,
// 4, 6, 9): numbers out of range or overflowing, more threads than cores, a batch whose memory
// estimate exceeds what is available, an empty training set, a non-finite loss, fp16 on the CPU, a
// resume in another mode; and a changed --lr on resume is applied and said. Also both examples'
// checkpoint flags (issue 28) and the header's strategy (the pipeline example's own limits:
// pipeline_example_test.cpp). A lone process each (no launcher), on the CPU, on small synthetic data.
#include <gmock/gmock.h>
#include <algorithm>
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>

#include "launch_helpers.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace fashion_mnist_limits_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

struct Data {
  std::string root = make_temp_dir("fashion_mnist_limits_");
  explicit Data(int train = 512, int test = 64) { write_synthetic_fashion_mnist(root, train, test); }
  ~Data() { remove_tree(root); }
};

ProcResult example(const std::string& data, const std::vector<std::string>& extra, const Env& env = {}) {
  std::vector<std::string> args = {build_path("/examples/fashion_mnist"), "--data", data, "--progress", "off"};
  args.insert(args.end(), extra.begin(), extra.end());
  Env all = clean_env(env);
  all["CUDA_VISIBLE_DEVICES"] = "";  // the CPU, where the memory check and the fp16 refusal apply
  return run_process(args, all, 120s);
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

TEST(FashionMnistLimits, NumbersOutOfRangeAreOneLineAndExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch-size", "99999999999999999999"},
       "error: --batch-size is out of range: expected an integer from 1 to 1048576, got 99999999999999999999\n"},
      {{"--lr", "inf"}, "error: --lr expects a number from 1e-12 to 1000, got inf\n"},
      {{"--lr", "nan"}, "error: --lr expects a number from 1e-12 to 1000, got nan\n"},
      {{"--threads", "100000"}, "error: --threads is out of range: expected an integer from 0 to 1024, got 100000\n"},
      {{"--epochs", "0"}, "error: --epochs is out of range: expected an integer from 1 to 100000, got 0\n"},
      {{"--max-steps", "-1"},
       "error: --max-steps is out of range: expected an integer from 0 to 1000000000000, got -1\n"},
      {{"--checkpoint-every", "2k"}, "error: --checkpoint-every expects an integer from 0 to 1000000000000, got 2k\n"},
      {{"--seed", "-3"}, "error: --seed is out of range: expected an integer from 0 to 9007199254740991, got -3\n"},
  };
  for (const auto& [args, message] : cases) {
    const ProcResult result = example("/nonexistent", args);
    EXPECT_EQ(result.code, 2) << result.describe();
    EXPECT_EQ(result.err, message);
  }
}

// CLI11's own refusals were two lines in its words ("--epochs: At Most 1 required but received 2", "Run
// with --help for more information."); a --strategy that --zero-stage silently replaced ran ZeRO; --devices
// 0 named TrainerOptions and exited 1; --resume "" read as auto. Each is now one line naming the flag and
// the value, exit 2, before anything starts (examples/common/cli_main.h, cli_choices.h).
TEST(FashionMnistLimits, CommandLineMistakesAreOneLineAndExitTwo) {
  const std::string file = build_path("/examples/fashion_mnist");  // any regular file
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--epochs", "1", "--max-steps=3", "--epochs", "2"}, "error: --epochs was given 2 times (1, 2): give it once\n"},
      {{"--bogus", "3"}, "error: unknown flag --bogus (see --help)\n"},
      {{"extra"}, "error: unexpected argument extra (see --help)\n"},
      {{"--strategy", "foo"},
       "error: --strategy foo is not accepted: expected one of ddp, dp, zero1, zero2, zero3, pipeline, single\n"},
      {{"--deepspeed-config", "/dev/null"},
       "error: --deepspeed-config /dev/null is a character device, not a regular file\n"},
      {{"--devices", "0"}, "error: --devices expects auto or a number of devices from 1 to 4096, got 0\n"},
      {{"--resume", ""},
       "error: --resume is empty: give auto, never or a checkpoint directory, or leave the flag out\n"},
      // Hostile pass 16, m-1: found only after the workers started, once per rank, exit 1.
      {{"--resume", "/nonexistent/step-3"}, "error: --resume /nonexistent/step-3: no such checkpoint directory\n"},
      {{"--resume", file},
       "error: --resume " + file +
           ": not a directory (give a checkpoint directory or one of its step-<n> directories)\n"},
      {{"--strategy", "pipeline", "--zero-stage", "2"},
       "error: --strategy pipeline and --zero-stage 2 ask for two different strategies: --zero-stage trains with "
       "the ZeRO engine in place of ddp (the default) or single only; leave one of them out\n"},
      {{"--strategy", "zero2", "--deepspeed-config", file},
       "error: --strategy zero2 and --deepspeed-config " + file +
           " ask for two different strategies: "
           "--deepspeed-config trains with the ZeRO engine in place of ddp (the default) or single only; leave "
           "--strategy out and give --zero-stage 2 to override the file's stage\n"},
  };
  for (const auto& [args, message] : cases) {
    const ProcResult result = example("/nonexistent", args);
    EXPECT_EQ(result.code, 2) << result.describe();
    EXPECT_EQ(result.err, message);
  }
  const ProcResult help = run_process({build_path("/examples/fashion_mnist"), "--help"}, clean_env(), 60s);
  EXPECT_EQ(help.code, 0) << help.describe();
  EXPECT_THAT(help.out, HasSubstr("--max-steps"));
}

// The hand-written loop read its flags with CLI11 alone: --lr nan reached Adam (a LibTorch stack
// trace), --lr inf printed a 300-digit bound and exit 105, --seed -1 was taken. It now reads them as
// fashion_mnist does.
TEST(FashionMnistLimits, LoopExampleReadsItsFlagsAsTheTrainerExampleDoes) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lr", "nan"}, "error: --lr expects a number from 1e-12 to 1000, got nan\n"},
      {{"--lr", "0"}, "error: --lr is out of range: expected a number from 1e-12 to 1000, got 0\n"},
      {{"--epochs", "0"}, "error: --epochs is out of range: expected an integer from 1 to 100000, got 0\n"},
      {{"--seed", "-1"}, "error: --seed is out of range: expected an integer from 0 to 9007199254740991, got -1\n"},
      {{"--seed", "99999999999999999999"},
       "error: --seed is out of range: expected an integer from 0 to 9007199254740991, got 99999999999999999999\n"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {build_path("/examples/fashion_mnist_loop"), "--data", "/nonexistent"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcResult result = run_process(argv, clean_env(), 60s);
    EXPECT_EQ(result.code, 2) << result.describe();
    EXPECT_EQ(result.err, message);
  }
}

// PowerSGD's flags without a PowerSGD hook were silently ignored (issue 39): refused as the command line
// is read.
TEST(FashionMnistLimits, PowerSgdFlagsWithoutAPowerSgdHookAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--powersgd-rank", "4"},
       "error: --powersgd-rank 4 is read only with --ddp-comm-hook powersgd or batched_powersgd (no hook is "
       "given): add the hook, or leave the flag out\n"},
      {{"--ddp-comm-hook", "fp16", "--powersgd-start-iter", "10"},
       "error: --powersgd-start-iter 10 is read only with --ddp-comm-hook powersgd or batched_powersgd (the hook "
       "is fp16): add the hook, or leave the flag out\n"},
  };
  for (const auto& [args, message] : cases) {
    const ProcResult result = example("/nonexistent", args);
    EXPECT_EQ(result.code, 2) << result.describe();
    EXPECT_EQ(result.err, message);
  }
  // With the hook the flags are taken: the run goes on to read the (missing) data.
  const ProcResult taken = example("/nonexistent", {"--ddp-comm-hook", "powersgd", "--powersgd-rank", "4"});
  EXPECT_EQ(taken.code, 1) << taken.describe();
  EXPECT_THAT(taken.err, Not(HasSubstr("--powersgd-rank")));
}

TEST(FashionMnistLimits, TimeoutVariableOutOfRange) {
  for (const char* value : {"inf", "1e20", "0.0001"}) {
    const ProcResult result = example("/nonexistent", {}, {{"COHORT_TIMEOUT", value}});
    EXPECT_EQ(result.code, 1) << result.describe();
    EXPECT_EQ(result.err,
              std::string("error: COHORT_TIMEOUT=") + value + " is not a number of seconds from 0.001 to 86400\n");
  }
}

TEST(FashionMnistLimits, EmptyTrainingSetIsRefused) {
  Data data(0, 64);
  const ProcResult result = example(data.root, {});
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_EQ(result.err, "error: the training set in " + data.root + " holds 0 images: there is nothing to train on\n");
}

TEST(FashionMnistLimits, ThreadsAreCappedAtTheCoresUnlessOversubscribed) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cores = CPU_COUNT(&set);
  if (cores >= 1024) GTEST_SKIP() << cores << " usable cores: --threads cannot exceed them (its limit is 1024)";
  const std::string asked = std::to_string(cores + 1);
  Data data;
  const ProcResult capped = example(data.root, {"--threads", asked, "--max-steps", "1"});
  ASSERT_EQ(capped.code, 0) << capped.describe();
  EXPECT_EQ(capped.err, "note: --threads " + asked + " with 1 rank(s) on this node is more than the " +
                            std::to_string(cores) + " core(s) this process may use: using " + std::to_string(cores) +
                            " per rank (--oversubscribe keeps " + asked + ")\n");
  EXPECT_THAT(capped.out, HasSubstr(", " + std::to_string(cores) + " thread(s) per rank"));
  const ProcResult over = example(data.root, {"--threads", asked, "--oversubscribe", "--max-steps", "1"});
  ASSERT_EQ(over.code, 0) << over.describe();
  EXPECT_EQ(over.err, "");
  EXPECT_THAT(over.out, HasSubstr(", " + asked + " thread(s) per rank"));
}

// --threads holds for OpenBLAS too, whatever OMP_NUM_THREADS says: OpenBLAS sizes its pool from it at
// load, and srun sets none, so `--threads 1` used to train with a BLAS thread per core under srun and
// print another params-sha256 than under cohortrun (tests/cluster found it).
TEST(FashionMnistLimits, ThreadsFlagHoldsWhateverOmpNumThreadsSays) {
  Data data;
  const std::vector<std::string> flags = {"--threads", "1", "--max-steps", "2", "--batch-size", "16"};
  const ProcResult one = example(data.root, flags, {{"OMP_NUM_THREADS", "1"}});
  const ProcResult two = example(data.root, flags, {{"OMP_NUM_THREADS", "2"}});
  ASSERT_EQ(one.code, 0) << one.describe();
  ASSERT_EQ(two.code, 0) << two.describe();
  EXPECT_EQ(params_digest_of(one.out).size(), 64u) << one.describe();
  EXPECT_EQ(params_digest_of(one.out), params_digest_of(two.out));
}

// Bytes per sample of one step as the example estimates it (examples/fashion_mnist/resources.cpp).
constexpr int64_t kStepBytesPerSample = 4 * 2 *
                                        ((784 + 2 * 21632 + 2 * 36864 + 3 * 9216 + 276) + (9 * 676 + 288 * 576));

int64_t mem_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

TEST(FashionMnistLimits, BatchLargerThanTheMemoryIsRefusedBeforeAllocating) {
  const int64_t available = mem_available();
  ASSERT_GT(available, 0) << "no MemAvailable in /proc/meminfo";
  // A training set large enough that its whole share in one batch needs more than the memory.
  const int64_t images = available / kStepBytesPerSample * 5 / 4 + 1;
  if (images > 400000) GTEST_SKIP() << "this machine has " << available << " bytes available: too many images";
  Data data(static_cast<int>(images), 16);
  const ProcResult result = example(data.root, {"--batch-size", "1000000", "--threads", "1"});
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_THAT(result.err,
              ::testing::MatchesRegex("error: --batch-size 1000000 \\(batches of " + std::to_string(images) +
                                      " samples on this rank\\) needs an estimated [0-9.]+ [GT]B per rank for one "
                                      "training step, more than the [0-9.]+ [MGT]B available to each of the 1 "
                                      "rank\\(s\\) on this node: lower --batch-size, or pass --no-memory-check to "
                                      "try anyway\n"));
  EXPECT_THAT(result.out, Not(HasSubstr("epoch 1/")));
}

TEST(FashionMnistLimits, NonFiniteLossStopsTrainingNamingTheStep) {
  Data data;
  const std::string config = write_file(data.root + "/ds_config.json", R"({
    "train_batch_size": 16, "zero_optimization": {"stage": 1},
    "optimizer": {"type": "SGD", "params": {"lr": 1e6}}})");  // the largest a ds_config takes
  const ProcResult result = example(data.root, {"--deepspeed-config", config, "--threads", "1"});
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_THAT(result.err, ::testing::StartsWith("error: step "));
  EXPECT_THAT(result.err, ::testing::EndsWith(": the training loss is nan; training stopped (the weights are no longer "
                                              "finite; lower the learning rate, now 1000000)\n"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_THAT(result.out, Not(HasSubstr("params-sha256")));
}

// Hostile pass 4, D8: an Adam eps of 0 makes 0/0 where a gradient is 0; the hint blamed the rate.
TEST(FashionMnistLimits, ANonFiniteLossFromAZeroEpsNamesTheEps) {
  Data data;
  const std::string config = write_file(data.root + "/ds_config.json", R"({
    "train_batch_size": 16, "zero_optimization": {"stage": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "eps": 0}}})");
  const ProcResult result = example(data.root, {"--deepspeed-config", config, "--threads", "1"});
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_THAT(result.err,
              ::testing::MatchesRegex("error: step [0-9]+: the training loss is nan; training stopped \\(the "
                                      "weights are no longer finite; the optimizer's eps is 0, which "
                                      "divides 0 by 0 where a gradient is 0: give it a positive value, "
                                      "e.g. 1e-8\\)\n"));
}

TEST(FashionMnistLimits, Fp16OnTheCpuIsRefusedAtStart) {
  Data data;
  const std::string config = write_file(data.root + "/ds_config.json", R"({
    "train_batch_size": 16, "fp16": {"enabled": true}, "zero_optimization": {"stage": 1}})");
  const ProcResult result = example(data.root, {"--deepspeed-config", config});
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_EQ(result.err, "error: --deepspeed-config " + config +
                            " enables fp16, but this rank runs on the CPU, where LibTorch has no fp16 convolution: "
                            "use \"bf16\": {\"enabled\": true} on CPU, or run on a GPU\n");
  EXPECT_THAT(result.out, Not(HasSubstr("data: ")));  // said before the data is loaded
}

// --lr 0.01 on resuming a run saved with 0.001 used to print "Adam lr 0.01" and train with 0.001.
TEST(FashionMnistLimits, ChangedLrOnResumeIsAppliedAndSaid) {
  Data data;
  for (const std::vector<std::string> mode : {std::vector<std::string>{}, {"--zero-stage", "1"}}) {
    const std::string ckpt = data.root + "/ckpt", copy = data.root + "/copy";
    fs::remove_all(ckpt);
    fs::remove_all(copy);
    std::vector<std::string> common = {"--batch-size", "16", "--threads", "1", "--checkpoint-dir"};
    auto args = [&](const std::string& dir, std::vector<std::string> extra) {
      std::vector<std::string> all = common;
      all.push_back(dir);
      all.insert(all.end(), mode.begin(), mode.end());
      all.insert(all.end(), extra.begin(), extra.end());
      return all;
    };
    const ProcResult first = example(data.root, args(ckpt, {"--max-steps", "3"}));
    ASSERT_EQ(first.code, 0) << first.describe();
    fs::copy(ckpt, copy, fs::copy_options::recursive);
    const ProcResult same = example(data.root, args(ckpt, {"--max-steps", "6"}));
    ASSERT_EQ(same.code, 0) << same.describe();
    EXPECT_THAT(same.out, Not(HasSubstr("lr: ")));
    const ProcResult changed = example(data.root, args(copy, {"--max-steps", "6", "--lr", "0.01"}));
    ASSERT_EQ(changed.code, 0) << changed.describe();
    EXPECT_THAT(changed.out, HasSubstr("resumed from " + copy +
                                       "/step-3 (step 3, saved by 1 rank(s))\n"
                                       "lr: training continues with 0.01 (--lr), not the checkpoint's 0.001: this "
                                       "run's setting wins, as setting a param group's lr after loading does in "
                                       "PyTorch\n"));
    EXPECT_NE(params_digest_of(changed.out), params_digest_of(same.out)) << "the new lr must change the training";
  }
}

// Resumed at its --max-steps (an elastic restart after the last save) no batch runs: the epoch line said
// "train loss 0.0000" and a time since the clock's epoch.
TEST(FashionMnistLimits, ResumeAtTheLastStepShowsTheAccuracyOnly) {
  Data data;
  const std::vector<std::string> flags = {"--batch-size", "16", "--threads",        "1",
                                          "--max-steps",  "2",  "--checkpoint-dir", data.root + "/ckpt"};
  const ProcResult first = example(data.root, flags);
  ASSERT_EQ(first.code, 0) << first.describe();
  const ProcResult again = example(data.root, flags);
  ASSERT_EQ(again.code, 0) << again.describe();
  const std::string accuracy = first.out.substr(first.out.find("test accuracy "));
  EXPECT_THAT(again.out, HasSubstr("epoch 1/2: " + accuracy.substr(0, accuracy.find(',')) +
                                   " (resumed at the last step: no training in this run)\n"));
  EXPECT_THAT(again.out, Not(HasSubstr("train loss")));
  EXPECT_EQ(params_digest_of(again.out), params_digest_of(first.out));
  // Hostile pass 16, m-4: a checkpoint past this run's end says so.
  const ProcResult shorter = example(data.root, {"--batch-size", "16", "--threads", "1", "--max-steps", "1",
                                                 "--checkpoint-dir", data.root + "/ckpt"});
  ASSERT_EQ(shorter.code, 0) << shorter.describe();
  EXPECT_THAT(shorter.out, HasSubstr(" (resumed at step 2, past this run's --max-steps 1: no training in this run)\n"))
      << shorter.describe();
  EXPECT_THAT(shorter.out, HasSubstr("stopped at step 2, past --max-steps 1 (the checkpoint it resumed from)\n"))
      << shorter.describe();
}

// Issue 17 item 9: a resume in another mode names both modes.
TEST(FashionMnistLimits, ResumeInAnotherModeNamesBothModes) {
  Data data;
  const std::string ddp = data.root + "/ddp", zero = data.root + "/zero";
  const std::vector<std::string> common = {"--batch-size", "16", "--threads", "1", "--max-steps", "2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  ASSERT_EQ(example(data.root, with({"--checkpoint-dir", ddp})).code, 0);
  ASSERT_EQ(example(data.root, with({"--checkpoint-dir", zero, "--zero-stage", "1"})).code, 0);
  const ProcResult ddp_as_zero = example(data.root, with({"--checkpoint-dir", ddp, "--zero-stage", "1"}));
  EXPECT_EQ(ddp_as_zero.code, 1) << ddp_as_zero.describe();
  EXPECT_EQ(ddp_as_zero.err, "error: checkpoint " + ddp +
                                 "/step-2 was saved by DDP (no ZeRO engine), this run uses "
                                 "ZeRO stage 1: the mode differs; resume with DDP (no ZeRO engine) or start a new "
                                 "checkpoint directory\n");
  const ProcResult stage_two = example(data.root, with({"--checkpoint-dir", zero, "--zero-stage", "2"}));
  EXPECT_EQ(stage_two.code, 1) << stage_two.describe();
  EXPECT_EQ(stage_two.err,
            "error: checkpoint " + zero +
                "/step-2 was saved by ZeRO stage 1, this run uses ZeRO "
                "stage 2: the mode differs; resume with ZeRO stage 1 or start a new checkpoint directory\n");
  const ProcResult zero_as_ddp = example(data.root, with({"--checkpoint-dir", zero}));
  EXPECT_EQ(zero_as_ddp.code, 1) << zero_as_ddp.describe();
  EXPECT_EQ(zero_as_ddp.err, "error: checkpoint " + zero +
                                 "/step-2 was saved by ZeRO stage 1, this run uses DDP (no "
                                 "ZeRO engine): the mode differs; resume with ZeRO stage 1 or start a new checkpoint "
                                 "directory\n");
}

// The checkpoint flags of both examples: an empty --checkpoint-dir and --checkpoint-every without one
// were accepted and saved nothing; a directory that cannot be made was found only at the first save,
// an epoch later. Each is now one line before anything starts (the data is not even read).
TEST(FashionMnistLimits, CheckpointFlagsThatWouldSaveNothingAreRefusedAtStart) {
  const std::string root = make_temp_dir("example_checkpoint_flags_");
  const std::string file = write_file(root + "/file", "not a directory");
  for (const std::string program : {"/examples/fashion_mnist", "/examples/pipeline"}) {
    auto run = [&](std::vector<std::string> args) {
      args.insert(args.begin(), {build_path(program), "--data", "/nonexistent"});
      return run_process(args, clean_env(), 60s);
    };
    const ProcResult empty = run({"--checkpoint-dir", ""});
    EXPECT_EQ(empty.code, 2) << program << empty.describe();
    EXPECT_EQ(empty.err, "error: --checkpoint-dir is empty: give a directory, or leave the flag out\n") << program;
    const ProcResult every = run({"--checkpoint-every", "5"});
    EXPECT_EQ(every.code, 2) << program << every.describe();
    EXPECT_EQ(every.err, "error: --checkpoint-every 5 needs --checkpoint-dir: without a directory nothing is saved\n")
        << program;
    const ProcResult async_alone = run({"--async-checkpoint"});
    EXPECT_EQ(async_alone.code, 2) << program << async_alone.describe();
    EXPECT_EQ(async_alone.err, "error: --async-checkpoint needs --checkpoint-dir: without a directory nothing is saved\n")
        << program;
    const ProcResult unwritable = run({"--checkpoint-dir", file + "/ckpt"});
    EXPECT_EQ(unwritable.code, 1) << program << unwritable.describe();
    EXPECT_EQ(unwritable.err,
              "error: --checkpoint-dir " + file + "/ckpt: cannot create the directory: Not a directory\n")
        << program;
    EXPECT_EQ(unwritable.out, "") << program;
  }
  remove_tree(root);
}

// The header named DDP under --strategy zero1/2/3; it names the strategy that trains.
TEST(FashionMnistLimits, HeaderNamesTheStrategy) {
  Data data(64, 16);
  const ProcResult zero = example(data.root,
                                  {"--strategy", "zero2", "--batch-size", "16", "--max-steps", "1", "--threads", "1"});
  ASSERT_EQ(zero.code, 0) << zero.describe();
  EXPECT_THAT(zero.out, HasSubstr("global), ZeRO stage 2 (Float), Adam lr 0.001, seed 0\n"));
}

}  // namespace

}  // namespace fashion_mnist_limits_test
