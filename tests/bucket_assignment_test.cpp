// assign_buckets() alone: limits, first-bucket size, dtype groups, launch order, coverage.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "ddp/bucket_assignment.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace bucket_assignment_test {

using cohort::detail::assign_buckets;
using cohort::detail::BucketLimits;

TEST(BucketAssignment, FirstBucketClosesEarlyThenCap) {
  // Ten parameters of 400 bytes in reverse order; first bucket >= 1000 bytes, then >= 2000.
  std::vector<int64_t> bytes(10, 400), group(10, 0), order(10);
  std::iota(order.rbegin(), order.rend(), 0);
  auto buckets = assign_buckets(order, bytes, group, BucketLimits{1000, 2000});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (std::vector<int64_t>{9, 8, 7}));
  EXPECT_EQ(buckets[1], (std::vector<int64_t>{6, 5, 4, 3, 2}));
  EXPECT_EQ(buckets[2], (std::vector<int64_t>{1, 0}));
}

TEST(BucketAssignment, GroupsNeverShareABucketAndOrderFollowsArrival) {
  std::vector<int64_t> bytes{100, 100, 100, 100}, group{0, 1, 0, 1}, order{3, 2, 1, 0};
  auto buckets = assign_buckets(order, bytes, group, BucketLimits{1000, 1000});
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::vector<int64_t>{3, 1}));  // group 1 seen first (param 3)
  EXPECT_EQ(buckets[1], (std::vector<int64_t>{2, 0}));
}

TEST(BucketAssignment, EveryParameterExactlyOnceForAnyOrder) {
  std::vector<int64_t> bytes, group, order;
  for (int i = 0; i < 57; ++i) {
    bytes.push_back(int64_t(37 * (i % 7 + 1)));
    group.push_back(i % 3);
    order.push_back((i * 11) % 57);
  }
  auto buckets = assign_buckets(order, bytes, group, BucketLimits{150, 400});
  std::vector<int64_t> all;
  for (const auto& b : buckets) {
    ASSERT_FALSE(b.empty());
    for (int64_t p : b) {
      EXPECT_EQ(group[p], group[b[0]]);
      all.push_back(p);
    }
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(57);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

TEST(BucketAssignment, OneLargeParameterMakesItsOwnBucket) {
  auto buckets = assign_buckets({2, 1, 0}, {10, 5000, 10}, {0, 0, 0}, BucketLimits{100, 100});
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(buckets[1], (std::vector<int64_t>{0}));
}

}  // namespace bucket_assignment_test
