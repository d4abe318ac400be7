// cohort::Error's kind and ranks: the constructors, the names, and the kinds raised where cohort knows
// them without a second process (argument checks, settings, a Comm failure carried to every throw).
// The multi-process kinds (timeout, dead peer, abort, desync) are asserted in tests/multiproc/comm_*.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "cohort/autocast.h"
#include "cohort/cifar.h"
#include "cohort/comm.h"
#include "cohort/data.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "cohort/pipeline.h"
#include "cohort/pipeline_schedule.h"
#include "cohort/sampler.h"
#include "cohort/world.h"
#include "comm/comm_failure.h"
#include "core/check.h"
#include "core/safe_file.h"
#include "support/errors.h"
#include "world/hostlist.h"
#include "world/launch_env.h"
#include "world/worker_env.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace error_kind_test {

using cohort::ErrorKind;
using cohort::testing::kind_of;

TEST(ErrorKind, PlainErrorsAreOtherWithNoRanks) {
  const cohort::Error error("something failed");
  EXPECT_EQ(error.kind(), ErrorKind::kOther);
  EXPECT_TRUE(error.ranks().empty());
  EXPECT_EQ(kind_of([] { COHORT_CHECK(false, "x=", 1); }), "kind=other ranks=");
}

TEST(ErrorKind, KindAndRanksAreKeptSortedWithoutRepeats) {
  const cohort::Error error("collective #3 timed out", ErrorKind::kTimeout, {3, 1, 3});
  EXPECT_EQ(error.kind(), ErrorKind::kTimeout);
  EXPECT_EQ(error.ranks(), (std::vector<int>{1, 3}));
  EXPECT_STREQ(error.what(), "collective #3 timed out");  // the text is the message, nothing added
  EXPECT_EQ(kind_of([] { COHORT_CHECK_KIND(kDesync, 1 + 1 == 3, "ranks disagree"); }), "kind=desync ranks=");
}

TEST(ErrorKind, EveryKindHasAName) {
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kOther), "other");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kTimeout), "timeout");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kPeerDied), "peer died");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kAborted), "aborted");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kDesync), "desync");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kIO), "I/O");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kOutOfMemory), "out of memory");
  EXPECT_STREQ(cohort::error_kind_name(ErrorKind::kInternal), "internal");
}

// A Comm's failure keeps its kind and world ranks from where it is known to the Error thrown.
TEST(ErrorKind, ACommFailureBecomesAnErrorOfItsKind) {
  const cohort::detail::CommFailure failure("collective #0 failed: rank 3 died", ErrorKind::kPeerDied, {3});
  const cohort::Error error = failure.error();
  EXPECT_STREQ(error.what(), "collective #0 failed: rank 3 died");
  EXPECT_EQ(error.kind(), ErrorKind::kPeerDied);
  EXPECT_EQ(error.ranks(), std::vector<int>{3});
  EXPECT_EQ(cohort::detail::CommFailure("text only").kind, ErrorKind::kOther);
  EXPECT_TRUE(cohort::detail::CommFailure().empty());
  // A transport's failure keeps the kind of a cohort::Error it raised; anything else is of no kind known.
  const auto from_check = cohort::detail::failure_from(
      "collective #1 could not start",
      cohort::Error("collectives take CPU or CUDA tensors", ErrorKind::kInvalidArgument));
  EXPECT_EQ(from_check.kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(from_check.message, "collective #1 could not start");
  EXPECT_EQ(cohort::detail::failure_from("x", std::runtime_error("y")).kind, ErrorKind::kOther);
}

TEST(ErrorKind, BadSettingsAreInvalidArguments) {
  EXPECT_EQ(kind_of([] { cohort::parse_integer("12x", {"--batch-size", 1, 1024}); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::parse_real("inf", {"COHORT_TIMEOUT", 0.001, 86400, "a number of seconds"}); }),
            "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::AutocastGuard guard(c10::kCPU, c10::kHalf); }), "kind=invalid argument ranks=");
}

// Data files: missing, truncated or damaged files are I/O; a bad option is an invalid argument.
TEST(ErrorKind, DataReadersSayIOForFilesAndInvalidArgumentForOptions) {
  const std::string missing = ::testing::TempDir() + "/error_kind_test_no_such_dir";
  EXPECT_EQ(kind_of([&] { cohort::data::load_idx_labels(missing + "/labels-idx1-ubyte"); }), "kind=I/O ranks=");
  EXPECT_EQ(kind_of([&] { cohort::data::load_fashion_mnist(missing); }), "kind=I/O ranks=");
  EXPECT_EQ(kind_of([&] { cohort::data::load_cifar10_batch(missing + "/data_batch_1.bin"); }), "kind=I/O ranks=");
  EXPECT_EQ(kind_of([&] { cohort::detail::read_own_file(missing + "/state.json", "test file", 1024); }),
            "kind=I/O ranks=");
  EXPECT_EQ(kind_of([] { cohort::data::fashion_mnist_file("", cohort::data::Split::kTrain, "pixels"); }),
            "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::DistributedSampler(10, cohort::SamplerOptions().num_replicas(2).rank(5)); }),
            "kind=invalid argument ranks=");
}

// Launcher variables, schedules and partitions are the user's input: invalid arguments. An invariant
// only cohort's own code can break is internal.
TEST(ErrorKind, SettingsAndSchedulesAreInvalidArgumentsAndInvariantsInternal) {
  const cohort::detail::EnvMap bad_rank{{"RANK", "one"}, {"WORLD_SIZE", "2"}};
  EXPECT_EQ(kind_of([&] { cohort::detail::detect_launch_env(bad_rank); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::detail::expand_nodelist("node[1-"); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::pipeline::make_schedule("zigzag", 2, 4); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::pipeline::from_csv("0F0,zz"); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::pipeline::partition_boundaries({1, 2}, 3, "uniform"); }),
            "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::detail::launch::assign_worker_ranks({2, 2}, 2); }), "kind=internal ranks=");
}

// A world of one: argument checks run before the collective's no-op.
TEST(ErrorKind, BadCollectiveArgumentsAreInvalidArguments) {
  auto& comm = cohort::init().comm();
  EXPECT_EQ(kind_of([&] { comm.broadcast(torch::ones({2}), 1); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([&] { comm.allreduce(torch::Tensor()); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([&] { comm.send(torch::ones({2}), 0); }), "kind=invalid argument ranks=");
}

}  // namespace error_kind_test
