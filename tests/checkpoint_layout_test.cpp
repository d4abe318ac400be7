// The pure arithmetic of checkpoints (src/checkpoint/layout.h): writer assignment, slice copies for
// resharding, and file names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpoint/layout.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_layout_test {

using namespace cohort::detail::ckpt;
using cohort::testing::error_of;

TEST(CheckpointLayout, WritersBalanceBytes) {
  // Largest first, each to the least-loaded rank: 100 -> 0, 60 -> 1, 50 -> 1, 10 -> 0, 5 -> 0.
  EXPECT_EQ(assign_writers({10, 100, 50, 60, 5}, 2), (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(assign_writers({1, 1, 1}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(assign_writers({7, 7, 7, 7}, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(assign_writers({}, 3), std::vector<int>{});
}

TEST(CheckpointLayout, OwnedTensorsAreWrittenOnceByOneHolder) {
  // Two pipeline stages on ranks {0, 1} and {2, 3} (data-parallel replicas): each tensor goes to one
  // of its holders, largest first to the least-loaded: a (100) -> 0, c (80) -> 2, b (60) -> 1, d (10) -> 3.
  const HeldTensors first = {{"a", 100}, {"b", 60}}, second = {{"c", 80}, {"d", 10}};
  const auto writers = assign_owned_writers(std::vector<HeldTensors>{first, first, second, second});
  EXPECT_EQ(writers, (std::map<std::string, int>{{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}}));
  // A tensor one rank holds is written by it; a rank holding nothing writes nothing.
  EXPECT_EQ(assign_owned_writers(std::vector<HeldTensors>{{}, {{"x", 4}}}), (std::map<std::string, int>{{"x", 1}}));
  EXPECT_TRUE(assign_owned_writers(std::vector<HeldTensors>(2)).empty());
  // Holders that disagree on the size are an error naming both.
  EXPECT_THAT(error_of([] { assign_owned_writers(std::vector<HeldTensors>{{{"w", 8}}, {{"w", 4}}}); }),
              ::testing::HasSubstr("ranks 0 and 1 hold tensor 'w' with 8 and 4 bytes"));
}

TEST(CheckpointLayout, SliceCopiesCutSavedSlicesDifferently) {
  // 1001 elements saved by 3 ranks (334, 334, 333), loaded by 2 (501, 500).
  const std::vector<Slice> saved = {{0, 334}, {334, 334}, {668, 333}};
  const auto first = plan_slice_copies(saved, 0, 501, "t");
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].slice, 0u);
  EXPECT_EQ(first[0].count, 334);
  EXPECT_EQ(first[1].slice, 1u);
  EXPECT_EQ(first[1].from, 0);
  EXPECT_EQ(first[1].to, 334);
  EXPECT_EQ(first[1].count, 167);
  const auto second = plan_slice_copies(saved, 501, 1001, "t");
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].from, 167);
  EXPECT_EQ(second[0].count, 167);
  EXPECT_EQ(second[1].slice, 2u);
  EXPECT_EQ(second[1].to, 167);
  EXPECT_EQ(second[1].count, 333);
  EXPECT_TRUE(plan_slice_copies(saved, 5, 5, "t").empty());
  // Saved out of order and with an empty slice.
  EXPECT_EQ(plan_slice_copies({{4, 6}, {0, 0}, {0, 4}}, 0, 10, "t").size(), 2u);
}

TEST(CheckpointLayout, SliceCopiesNameHolesAndOverlaps) {
  EXPECT_EQ(error_of([] { plan_slice_copies({{0, 4}, {6, 4}}, 0, 10, "tensor 'x'"); }),
            "tensor 'x': no saved slice holds elements [4, 6)");
  EXPECT_EQ(error_of([] { plan_slice_copies({{0, 4}}, 0, 10, "tensor 'x'"); }),
            "tensor 'x': no saved slice holds elements [4, 10)");
  EXPECT_EQ(error_of([] { plan_slice_copies({{0, 6}, {4, 6}}, 0, 10, "tensor 'x'"); }),
            "tensor 'x': saved slices overlap at element 4");
}

TEST(CheckpointLayout, Names) {
  EXPECT_EQ(step_dir_name(20), "step-20");
  EXPECT_EQ(parse_step_dir("step-20"), 20);
  EXPECT_EQ(parse_step_dir("step-0"), 0);
  EXPECT_FALSE(parse_step_dir(".step-20.tmp"));
  EXPECT_FALSE(parse_step_dir("step-"));
  EXPECT_FALSE(parse_step_dir("step-2x"));
  EXPECT_FALSE(parse_step_dir("latest"));
  EXPECT_EQ(shard_file_name(1, 4), "shard-00001-of-00004.bin");
}

TEST(CheckpointLayout, RetentionNeverRemovesLaterSteps) {
  auto plan = plan_retention({10, 20, 30, 40, 25}, 25, 2);
  EXPECT_EQ(plan.newer, (std::vector<int64_t>{40, 30}));
  EXPECT_EQ(plan.remove, (std::vector<int64_t>{10}));
  plan = plan_retention({10, 20, 30}, 30, 0);  // keep_last 0: keep everything
  EXPECT_TRUE(plan.remove.empty() && plan.newer.empty());
  plan = plan_retention({5, 6, 7, 8}, 8, 1);
  EXPECT_EQ(plan.remove, (std::vector<int64_t>{7, 6, 5}));
}

}  // namespace checkpoint_layout_test
