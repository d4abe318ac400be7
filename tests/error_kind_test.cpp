// cohort::Error's kind and ranks: the constructors, the names, and the kinds raised where cohort knows
// them without a second process (argument checks, settings, a Comm failure carried to every throw).
// The multi-process kinds (timeout, dead peer, abort, desync) are asserted in tests/multiproc/comm_*.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "cohort/autocast.h"
#include "cohort/comm.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "cohort/world.h"
#include "comm/comm_failure.h"
#include "core/check.h"
#include "support/errors.h"

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
}

TEST(ErrorKind, BadSettingsAreInvalidArguments) {
  EXPECT_EQ(kind_of([] { cohort::parse_integer("12x", {"--batch-size", 1, 1024}); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::parse_real("inf", {"COHORT_TIMEOUT", 0.001, 86400, "a number of seconds"}); }),
            "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([] { cohort::AutocastGuard guard(c10::kCPU, c10::kHalf); }), "kind=invalid argument ranks=");
}

// A world of one: argument checks run before the collective's no-op.
TEST(ErrorKind, BadCollectiveArgumentsAreInvalidArguments) {
  auto& comm = cohort::init().comm();
  EXPECT_EQ(kind_of([&] { comm.broadcast(torch::ones({2}), 1); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([&] { comm.allreduce(torch::Tensor()); }), "kind=invalid argument ranks=");
  EXPECT_EQ(kind_of([&] { comm.send(torch::ones({2}), 0); }), "kind=invalid argument ranks=");
}

}  // namespace error_kind_test
