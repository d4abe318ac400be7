// The ZeRO engine's settings (src/zero/engine_settings.h), alone in a lone process (a world of one):
// the dtypes and the placement a config implies, and each value the engine refuses, by its key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/error.h"
#include "cohort/zero.h"
#include "support/errors.h"
#include "zero/engine_settings.h"

namespace zero_engine_settings_test {

using cohort::detail::make_engine_settings;
using cohort::detail::Tier;
using ::testing::HasSubstr;

namespace {

cohort::ZeroConfig with_stage(int stage) {
  return cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(stage));
}

// The message of the error, after checking that its kind is kInvalidArgument.
std::string refusal(const cohort::ZeroConfig& config, const cohort::EngineOptions& options = {}) {
  try {
    make_engine_settings(config, options);
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected cohort::Error";
  return "";
}

}  // namespace

TEST(ZeroEngineSettings, Fp32OnTheDeviceByDefault) {
  const auto s = make_engine_settings(with_stage(1), {});
  EXPECT_EQ(s.stage, 1);
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.world, 1);
  EXPECT_EQ(s.compute_dtype, torch::kFloat);
  EXPECT_EQ(s.comm_dtype, torch::kFloat);
  EXPECT_FALSE(s.separate_master);
  EXPECT_EQ(s.placement.masters, Tier::kDevice);
  EXPECT_EQ(s.placement.parameter_shards, Tier::kDevice);
}

TEST(ZeroEngineSettings, MixedPrecisionCommunicationDtypeAndOffload) {
  auto config = cohort::ZeroConfig()
                    .bf16(cohort::Bf16Config().enabled(true))
                    .communication_data_type(cohort::CommDataType::kFp32)
                    .gradient_accumulation_steps(4)
                    .zero_optimization(cohort::ZeroOptimizationConfig().stage(2).offload_optimizer(
                        cohort::OffloadOptimizerConfig().device(cohort::OffloadDevice::kCpu)));
  const auto s = make_engine_settings(config, cohort::EngineOptions().prefetch_units(1));
  EXPECT_EQ(s.compute_dtype, torch::kBFloat16);
  EXPECT_EQ(s.comm_dtype, torch::kFloat);
  EXPECT_TRUE(s.separate_master);
  EXPECT_EQ(s.gas, 4);
  EXPECT_EQ(s.prefetch_units, 1);
  EXPECT_EQ(s.placement.masters, Tier::kHost);
  EXPECT_EQ(s.config.gradient_accumulation_steps(), 4);  // the config itself travels with them
  EXPECT_EQ(make_engine_settings(with_stage(0).fp16(cohort::Fp16Config().enabled(true)), {}).compute_dtype,
            torch::kHalf);
}

TEST(ZeroEngineSettings, RefusesWhatTheEngineCannotRun) {
  EXPECT_THAT(refusal(with_stage(4)), HasSubstr("zero_optimization.stage: must be 0, 1, 2 or 3, got 4"));
  EXPECT_THAT(refusal(with_stage(1).gradient_accumulation_steps(0)),
              HasSubstr("gradient_accumulation_steps: must be >= 1, got 0"));
  EXPECT_THAT(refusal(with_stage(3), cohort::EngineOptions().prefetch_units(-1)),
              HasSubstr("EngineOptions::prefetch_units: must be >= 0, got -1"));
  EXPECT_THAT(
      refusal(with_stage(1).fp16(cohort::Fp16Config().enabled(true)).bf16(cohort::Bf16Config().enabled(true))),
      HasSubstr("fp16.enabled and bf16.enabled are both true"));
}

}  // namespace zero_engine_settings_test
