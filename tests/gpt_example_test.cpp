// End to end: examples/gpt on 2 ranks it starts itself (--devices 2), a tiny GPT on a small text the
// test writes, a few steps. It prints "val loss" at each validation, a sample and params-sha256; fsdp
// (ZeRO stage 3, blocks as sharding units) with and without activation checkpointing ends with exactly
// DDP's params-sha256 (fp32, no dropout: AdamW is elementwise, so updating shards changes no bit).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "launch_helpers.h"
#include "synthetic_fashion_mnist.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace gpt_example_test {

using ::testing::HasSubstr;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

struct Job {
  std::string root = make_temp_dir("gpt_example_");
  Job() {
    std::ofstream text(root + "/text.txt");
    for (int i = 0; i < 200; ++i) text << "The quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  ~Job() { remove_tree(root); }
  ProcResult run(const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {build_path("/examples/gpt"), "--data", root + "/text.txt", "--devices", "2",
                                     "--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
                                     "--batch-size", "4", "--max-steps", "6", "--eval-interval", "3",
                                     "--eval-iters", "2", "--sample-tokens", "40", "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_process(args, clean_env(), 180s);
  }
};

TEST(GptExample, FsdpEndsWithDdpsParametersAndPrintsValidationAndASample) {
  Job job;
  const ProcResult ddp = job.run({"--strategy", "ddp"});
  ASSERT_EQ(ddp.code, 0) << ddp.describe();
  EXPECT_THAT(ddp.out, HasSubstr("GPT 7488 parameters; ddp on 2 rank(s)"));
  EXPECT_EQ(count_of(ddp.out, "val loss "), 2u) << ddp.describe();
  EXPECT_THAT(ddp.out, HasSubstr("sample:\n"));
  const std::string expected = params_digest_of(ddp.out);
  ASSERT_EQ(expected.size(), 64u) << ddp.describe();
  const ProcResult fsdp = job.run({"--strategy", "fsdp"});
  ASSERT_EQ(fsdp.code, 0) << fsdp.describe();
  EXPECT_EQ(params_digest_of(fsdp.out), expected) << fsdp.describe();
  const ProcResult recompute = job.run({"--strategy", "fsdp", "--activation-checkpointing", "--keep-gathered"});
  ASSERT_EQ(recompute.code, 0) << recompute.describe();
  EXPECT_EQ(params_digest_of(recompute.out), expected) << recompute.describe();
}

TEST(GptExample, RefusesABadStrategyAndAMissingText) {
  const ProcResult bad = run_process({build_path("/examples/gpt"), "--strategy", "zero4"}, clean_env(), 30s);
  EXPECT_EQ(bad.code, 2) << bad.describe();
  EXPECT_THAT(bad.err, HasSubstr("--strategy: zero4 not in {ddp,zero1,zero2,zero3,fsdp}"));
  const ProcResult missing = run_process({build_path("/examples/gpt"), "--data", "/nonexistent/text"}, clean_env(), 60s);
  EXPECT_EQ(missing.code, 1) << missing.describe();
  EXPECT_EQ(missing.err, "error: --data: /nonexistent/text does not exist\n");
}

}  // namespace

}  // namespace gpt_example_test
