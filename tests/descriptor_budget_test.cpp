// File descriptors counted before init connects anything (issue 43, item 2): the world's sockets per
// rank as the scale rehearsal counted them, a soft RLIMIT_NOFILE below the need raised to the hard
// limit (and a 2-rank world then runs), and a hard limit below it refused in one line naming the limit
// and the need, before any connection (a world of 200 ranks whose peers never start).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "world/descriptor_budget.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace descriptor_budget_test {

using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

void set_limits(rlim_t soft, rlim_t hard) {
  struct rlimit limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = soft;
  if (hard != 0) limit.rlim_max = hard;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0) << "soft " << soft << " hard " << hard;
}

rlim_t soft_limit() {
  struct rlimit limit {};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

}  // namespace

TEST(DescriptorBudget, TheWorldsSocketsAsTheRehearsalCountedThem) {
  EXPECT_EQ(cohort::detail::world_sockets(32, 8), 83);  // docs/BENCHMARKS.md, 4 hosts x 8 ranks
  EXPECT_EQ(cohort::detail::world_sockets(512, 8), 2 * 511 + 2 * 63 + 2 * 7 + 1);
  EXPECT_EQ(cohort::detail::world_sockets(1, 1), 0);
  EXPECT_EQ(cohort::detail::world_sockets(6, 4), 2 * 5 + 2 * 5 + 1);  // uneven hosts: counted as 6 of one
}

TEST(DescriptorBudget, ASoftLimitIsRaisedAndAWorldRunsUnderIt) {
  run_ranks(2, [](int, int) {
    set_limits(40, 0);  // below the 2-rank world's need (5 sockets + 64), the hard limit as it is
    auto world = cohort::init();
    EXPECT_GE(soft_limit(), rlim_t(69));
    EXPECT_EQ(world.comm().allreduce(torch::ones({3})).sum().item<double>(), 6.0);
  });
}

TEST(DescriptorBudget, AHardLimitBelowTheNeedIsOneLineBeforeAnyConnection) {
  run_ranks(1, [](int, int) {
    set_limits(256, 256);
    const std::string error = error_of([] {
      cohort::init(cohort::InitOptions().rank(0).world_size(200).master_addr("127.0.0.1").master_port(9));
    });
    EXPECT_THAT(error, HasSubstr("cohort::init: this rank of 200 ("));
    EXPECT_THAT(error, HasSubstr("file descriptors (its world's sockets "));
    EXPECT_THAT(error, HasSubstr("more than RLIMIT_NOFILE allows (soft 256, hard 256): raise it in the job script "
                                 "(ulimit -n "));
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  });
}

}  // namespace descriptor_budget_test
