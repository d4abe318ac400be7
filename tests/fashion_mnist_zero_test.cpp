// End to end: the Fashion-MNIST example trained by the ZeRO engine (--zero-stage, --deepspeed-config)
// under cohortrun on 2 ranks, on a small synthetic dataset. In fp32, stages 1, 2 and 3 end with
// exactly DDP's params-sha256 (Adam is elementwise, so updating shards changes no bit); a bf16
// stage 3 run stopped at a checkpoint and resumed ends where an uninterrupted one does; one saved by 2
// ranks accumulating 2 resumes on 1 rank accumulating 4.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "launch_helpers.h"
#include "support/multiproc.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace fashion_mnist_zero_test {

using ::testing::HasSubstr;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

struct Job {
  std::string root = make_temp_dir("fashion_mnist_zero_");
  Job() { write_synthetic_fashion_mnist(root, 512, 64); }  // 16 steps per epoch at 2 ranks x 16
  ~Job() { remove_tree(root); }
  ProcResult run(const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {build_path("/tools/cohortrun"), "--standalone", "--nproc-per-node", "2",
                                     build_path("/examples/fashion_mnist"), "--data", root, "--epochs", "1",
                                     "--batch-size", "16", "--threads", "1", "--progress", "off"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_process(args, clean_env(), 120s);
  }
};

TEST(FashionMnistZero, StagesOneToThreeEndWithDdpsParameters) {
  Job job;
  const ProcResult ddp = job.run({});
  ASSERT_EQ(ddp.code, 0) << ddp.describe();
  const std::string expected = params_digest_of(ddp.out);
  ASSERT_EQ(expected.size(), 64u) << ddp.describe();
  for (const char* stage : {"1", "2", "3"}) {
    const ProcResult zero = job.run({"--zero-stage", stage});
    ASSERT_EQ(zero.code, 0) << zero.describe();
    EXPECT_THAT(zero.out, HasSubstr(std::string("ZeRO stage ") + stage + " (Float), Adam lr 0.001"));
    EXPECT_EQ(params_digest_of(zero.out), expected) << "stage " << stage << "\n" << zero.describe();
  }
  const ProcResult bad = run_process({build_path("/examples/fashion_mnist"), "--zero-stage", "4"}, clean_env(), 30s);
  EXPECT_EQ(bad.code, 2) << bad.describe();
  EXPECT_EQ(bad.err, "error: --zero-stage is out of range: expected an integer from 0 to 3, got 4\n");
}

// Hostile pass 15, m-1: stage 3 on two nodes of two ranks is HSDP by default (sharded within a node,
// replicated across), and the job says so; its header is printed before the Trainer chooses.
TEST(FashionMnistZero, StageThreeOnTwoNodesSaysItIsHsdp) {
  Job job;
  const std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  const auto node = [&] {
    return start_process({build_path("/tools/cohortrun"), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-id",
                          "hsdp", "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv,
                          build_path("/examples/fashion_mnist"), "--data", job.root, "--epochs", "1", "--max-steps",
                          "2", "--batch-size", "16", "--threads", "1", "--progress", "off", "--zero-stage", "3"},
                         clean_env());
  };
  Proc a = node(), b = node();
  const ProcResult ra = finish_process(a, 120s), rb = finish_process(b, 120s);
  ASSERT_EQ(ra.code, 0) << ra.describe();
  ASSERT_EQ(rb.code, 0) << rb.describe();
  EXPECT_THAT(ra.out + rb.out, HasSubstr("sharding: HSDP, each tensor sharded over 2 ranks (a node's) and "
                                         "replicated 2 times across nodes"))
      << ra.describe() << rb.describe();
  const ProcResult flat = job.run({"--zero-stage", "3", "--max-steps", "2"});
  ASSERT_EQ(flat.code, 0) << flat.describe();
  EXPECT_THAT(flat.out, ::testing::Not(HasSubstr("sharding: HSDP"))) << flat.describe();
}

TEST(FashionMnistZero, DeepSpeedConfigBf16StageThreeResumesFromItsCheckpoint) {
  Job job;
  const std::string config = job.root + "/ds_config.json";
  std::ofstream(config) << R"({
    // DeepSpeed's hjson: comments and trailing commas are fine
    "train_batch_size": 32,
    "zero_optimization": {"stage": 3},
    "bf16": {"enabled": true},
    "optimizer": {"type": "Adam", "params": {"lr": 0.002}},
  })";
  const ProcResult straight = job.run({"--deepspeed-config", config});
  ASSERT_EQ(straight.code, 0) << straight.describe();
  EXPECT_THAT(straight.out, HasSubstr("batch 16 per rank (32 global), ZeRO stage 3 (BFloat16), Adam lr 0.002"));
  const std::string ckpt = job.root + "/ckpt";
  const ProcResult first = job.run({"--deepspeed-config", config, "--checkpoint-dir", ckpt, "--max-steps", "7"});
  ASSERT_EQ(first.code, 0) << first.describe();
  const ProcResult rest = job.run({"--deepspeed-config", config, "--checkpoint-dir", ckpt});
  ASSERT_EQ(rest.code, 0) << rest.describe();
  EXPECT_THAT(rest.out, HasSubstr("resumed from " + ckpt + "/step-7"));
  EXPECT_EQ(params_digest_of(rest.out), params_digest_of(straight.out)) << rest.describe();
}

// Hostile pass 11, S-a: saved at step 3 by 2 ranks accumulating 2 micro-batches (6 micro-steps), a
// resume on 1 rank accumulating 4 (the same samples per step) stopped on "the ZeRO engine's
// accumulation boundary and the Trainer's disagree": the engine's window now begins at the load.
TEST(FashionMnistZero, AResumeOnHalfTheRanksWithTwiceTheAccumulationGoesOn) {
  Job job;
  const auto config = [&](const char* name, int accumulate) {
    const std::string path = job.root + "/" + name;
    std::ofstream(path) << R"({"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 2},)"
                        << R"( "gradient_accumulation_steps": )" << accumulate << "}";
    return path;
  };
  const std::string ckpt = job.root + "/ckpt";
  const ProcResult first = job.run({"--deepspeed-config", config("two.json", 2), "--checkpoint-dir", ckpt,
                                    "--checkpoint-every", "1", "--max-steps", "3"});
  ASSERT_EQ(first.code, 0) << first.describe();
  const ProcResult rest = run_process({build_path("/examples/fashion_mnist"), "--data", job.root, "--epochs", "1",
                                       "--threads", "1", "--progress", "off", "--deepspeed-config",
                                       config("four.json", 4), "--checkpoint-dir", ckpt, "--max-steps", "5"},
                                      clean_env(), 120s);
  ASSERT_EQ(rest.code, 0) << rest.describe();
  EXPECT_THAT(rest.out, HasSubstr("resumed from " + ckpt + "/step-3"));
  EXPECT_TRUE(std::ifstream(ckpt + "/step-5/manifest.json").good()) << rest.describe();
}

}  // namespace

}  // namespace fashion_mnist_zero_test
