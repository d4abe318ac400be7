// The ZeRO engine's layout (src/zero/partition.h) and fp16 loss scaler (src/zero/loss_scaler.h):
// pure pieces, tested without ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cohort/error.h"
#include "zero/loss_scaler.h"
#include "zero/partition.h"

using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace cohort::detail {
namespace {

TEST(ZeroPartition, GroupsBySizeKeepOrderAndPadToTheWorld) {
  auto groups = group_by_size({10, 5, 7, 30, 1}, 16, 3);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_THAT(groups[0].params, ElementsAre(0, 1));
  EXPECT_THAT(groups[0].offsets, ElementsAre(0, 10));
  EXPECT_EQ(groups[0].numel, 15);
  EXPECT_EQ(groups[0].padded, 15);
  EXPECT_THAT(groups[1].params, ElementsAre(2));
  EXPECT_THAT(groups[2].params, ElementsAre(3));  // larger than the limit: a group of its own
  EXPECT_EQ(groups[2].padded, 30);
  EXPECT_THAT(groups[3].params, ElementsAre(4));
  EXPECT_EQ(groups[3].padded, 3);  // one element, one shard element per rank
  EXPECT_EQ(groups[3].shard, 1);
  EXPECT_EQ(groups[1].padded, 9);
  EXPECT_EQ(groups[1].owned(2), std::make_pair(int64_t(6), int64_t(9)));
  EXPECT_EQ(groups[1].owned_real(2), std::make_pair(int64_t(6), int64_t(7)));
  EXPECT_EQ(groups[3].owned_real(2), std::make_pair(int64_t(1), int64_t(1)));  // padding only: empty
}

TEST(ZeroPartition, SameGroupsAtEveryWorldSize) {
  // Checkpoints load at another world size because only the padding depends on it.
  for (int n = 1; n <= 4; ++n) {
    auto groups = group_by_size({10, 5, 7, 30, 1}, 16, n);
    ASSERT_EQ(groups.size(), 4u);
    EXPECT_EQ(groups[0].numel, 15);
    EXPECT_EQ(groups[0].padded % n, 0);
    EXPECT_LT(groups[0].padded - groups[0].numel, n);
  }
}

TEST(ZeroPartition, GroupsByUnitFollowFirstAppearance) {
  auto groups = group_by_unit({4, 2, 6, 3}, {0, 0, 2, 2}, 2);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[0].params, ElementsAre(0, 1));
  EXPECT_EQ(groups[0].padded, 6);
  EXPECT_THAT(groups[1].params, ElementsAre(2, 3));
  EXPECT_EQ(groups[1].padded, 10);
  EXPECT_EQ(groups[1].shard, 5);
}

TEST(ZeroPartition, RejectsBadSizes) {
  try {
    group_by_size({1}, 0, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("reduce_bucket_size must be >= 1, got 0"));
  }
}

TEST(LossScaler, DisabledIsOne) {
  LossScaler scaler(Fp16Config{});
  EXPECT_EQ(scaler.scale(), 1.0);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1.0);
}

TEST(LossScaler, StaticScaleNeverMoves) {
  LossScaler scaler(Fp16Config().enabled(true).loss_scale(128));
  EXPECT_FALSE(scaler.dynamic());
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 128.0);
}

// Hostile pass 8, S2: an fp32 run took a saved scale of 3 and scaled its loss by it.
TEST(LossScaler, OnlyADynamicScalerTakesASavedScale) {
  const cohort::StateValues saved = {{"zero.loss_scaler.scale", 3}, {"zero.loss_scaler.iter", 9}};
  LossScaler disabled(Fp16Config{}), fixed(Fp16Config().enabled(true).loss_scale(128));
  disabled.load(saved, "zero.loss_scaler.");
  fixed.load(saved, "zero.loss_scaler.");
  EXPECT_EQ(disabled.scale(), 1.0);
  EXPECT_EQ(fixed.scale(), 128.0);
  LossScaler dynamic(Fp16Config().enabled(true));
  dynamic.load(saved, "zero.loss_scaler.");
  EXPECT_EQ(dynamic.scale(), 3.0);
}

TEST(LossScaler, DeepSpeedHysteresisAndWindow) {
  LossScaler scaler(Fp16Config().enabled(true).initial_scale_power(4).loss_scale_window(3).hysteresis(2));
  EXPECT_EQ(scaler.scale(), 16.0);
  scaler.update(true);  // first overflow: hysteresis absorbs it
  EXPECT_EQ(scaler.scale(), 16.0);
  scaler.update(true);  // second: halve
  EXPECT_EQ(scaler.scale(), 8.0);
  scaler.update(true);  // hysteresis not restored yet: halve again
  EXPECT_EQ(scaler.scale(), 4.0);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4.0);
  scaler.update(false);  // three clean steps since the overflow: double, hysteresis restored
  EXPECT_EQ(scaler.scale(), 8.0);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 8.0);
}

TEST(LossScaler, FirstDoublingAfterOneWindow) {
  LossScaler scaler(Fp16Config().enabled(true).initial_scale_power(1).loss_scale_window(4));
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 2.0);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4.0);
}

TEST(LossScaler, OverflowAtTheMinimumIsAnError) {
  LossScaler scaler(Fp16Config().enabled(true).initial_scale_power(1).hysteresis(1).min_loss_scale(1));
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1.0);
  try {
    scaler.update(true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("gradients overflowed at the minimum loss scale 1 (fp16.min_loss_scale)"));
  }
}

TEST(LossScaler, SavesAndLoadsItsState) {
  Fp16Config config = Fp16Config().enabled(true).initial_scale_power(4).loss_scale_window(3);
  LossScaler a(config), b(config);
  a.update(true);
  a.update(true);
  a.update(false);
  StateValues values;
  a.save(values, "s.");
  b.load(values, "s.");
  for (bool overflow : {false, false, true, true, false}) {
    a.update(overflow);
    b.update(overflow);
    EXPECT_EQ(a.scale(), b.scale());
  }
}

}  // namespace
}  // namespace cohort::detail
