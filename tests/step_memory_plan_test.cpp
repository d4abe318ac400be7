// The step's memory beside the model states (src/zero/step_memory_plan.h): stage 3's gathered units
// within the prefetch bucket, the gradients of the reductions in flight, the swappers' buffers, the
// construction and the peak; then cohort-plan's --model gpt table and its refusals.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cohort/error.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "zero/step_memory_plan.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace step_memory_plan_test {
namespace {

using cohort::detail::PlanOptimizer;
using cohort::detail::PlanPrecision;
using cohort::detail::PlanTier;
using cohort::detail::StepMemory;
using cohort::detail::StepMemoryInput;

// 10 units of 100 parameters (plus 24 in none), 4 ranks, fp32 AdamW on CPUs, stage 3.
StepMemoryInput input() {
  StepMemoryInput in;
  in.states.num_params = 1024;
  in.states.ranks = 4;
  in.states.stage = 3;
  in.states.precision = PlanPrecision::kFp32;
  in.states.optimizer = PlanOptimizer::kAdamW;
  in.states.cpu_run = true;
  in.unit_params = 100;
  in.units = 10;
  in.prefetch_bucket_size = 250;
  return in;
}

TEST(StepMemoryPlan, Stage3GathersTheRunningUnitAndTheUnitsTheBucketHolds) {
  StepMemoryInput in = input();
  EXPECT_EQ(cohort::detail::plan_step_memory(in).gathered, 3 * 100 * 4);  // 250 / 100: two ahead
  in.prefetch_units = 1;                                                 // FSDP2's one ahead
  EXPECT_EQ(cohort::detail::plan_step_memory(in).gathered, 2 * 100 * 4);
  in.prefetch_units = 0;
  in.prefetch_bucket_size = 0;
  EXPECT_EQ(cohort::detail::plan_step_memory(in).gathered, 100 * 4);
  in.prefetch_bucket_size = 1e9;  // never more than the other units
  EXPECT_EQ(cohort::detail::plan_step_memory(in).gathered, 10 * 100 * 4);
  in.states.stage = 2;
  EXPECT_EQ(cohort::detail::plan_step_memory(in).gathered, 0) << "stage 2 keeps its parameters whole";
}

TEST(StepMemoryPlan, ReductionsInFlightHoldWholeGradientsAndTheirShards) {
  StepMemoryInput in = input();
  // The group being made, the one just launched and kMaxReductionsInFlight (2) more, whole, and the
  // shards three reductions land in (ceil(100 / 4) = 25 elements).
  EXPECT_EQ(cohort::detail::plan_step_memory(in).reducing, 4 * 100 * 4 + 3 * 25 * 4);
  in.units = 2;
  EXPECT_EQ(cohort::detail::plan_step_memory(in).reducing, 2 * 100 * 4 + 3 * 25 * 4) << "no more groups than units";
  in = input();
  in.states.stage = 2;
  in.reduce_bucket_size = 300;  // stage 2's groups are reduce buckets: 4 of them over 1024 elements
  EXPECT_EQ(cohort::detail::plan_step_memory(in).reducing, 4 * 300 * 4 + 3 * 75 * 4);
  in.states.stage = 1;
  EXPECT_EQ(cohort::detail::plan_step_memory(in).reducing, 0) << "stage 1's whole gradient is a model state";
}

TEST(StepMemoryPlan, NvmeHoldsTheSteppedGroupAndBufferCountSlots) {
  StepMemoryInput in = input();
  EXPECT_EQ(cohort::detail::plan_step_memory(in).swapping, 0);
  in.states.offload_optimizer = PlanTier::kNvme;
  // A 25-element shard: master 4 + moments 8 + gradient 4 (a CPU run's stage 3 gradients go to the
  // file too), and 4 buffers of the largest slot (the moments, 8 bytes an element).
  EXPECT_EQ(cohort::detail::plan_step_memory(in).swapping, 25 * 16 + 4 * 25 * 8);
  in.states.offload_params = PlanTier::kNvme;
  in.param_buffer_count = 2;
  EXPECT_EQ(cohort::detail::plan_step_memory(in).swapping, 25 * 16 + 4 * 25 * 8 + 3 * 25 * 4);
  in.states.cpu_run = false;  // a GPU keeps its gradient shards
  in.states.offload_params = PlanTier::kDevice;
  EXPECT_EQ(cohort::detail::plan_step_memory(in).swapping, 25 * 12 + 4 * 25 * 8);
}

TEST(StepMemoryPlan, ThePeakIsTheLargerOfTheConstructionAndTheStep) {
  StepMemoryInput in = input();
  in.activation_bytes = 1000;
  in.process_bytes = 5000;
  const StepMemory step = cohort::detail::plan_step_memory(in);
  EXPECT_EQ(step.total(), step.gathered + step.reducing + step.swapping + 1000 + 5000);
  // Built whole first: 1024 parameters of 4 bytes; sharded as made: 256 and the unit being made.
  EXPECT_EQ(cohort::detail::planned_construction_bytes(in), 5000 + 1024 * 4);
  in.sharded_init = true;
  EXPECT_EQ(cohort::detail::planned_construction_bytes(in), 5000 + 256 * 4 + 100 * 4);
  // Stage 3 without offload: params 4 + grads 4 + moments 8 bytes for each of 256 elements.
  EXPECT_EQ(cohort::detail::planned_peak_bytes(in), 256 * 16 + step.total());
  // A model built whole on 8 ranks: 40000 bytes at construction, 16 x 1250 of states after.
  in.states.num_params = 10000;
  in.states.ranks = 8;
  in.sharded_init = false;
  EXPECT_EQ(cohort::detail::planned_construction_bytes(in), 5000 + 40000);
  EXPECT_EQ(cohort::detail::planned_peak_bytes(in), 5000 + 40000);
}

TEST(StepMemoryPlan, RefusesAUnitLargerThanTheModelAndBadCounts) {
  StepMemoryInput in = input();
  in.unit_params = 2000;
  EXPECT_EQ(cohort::testing::error_of([&] { cohort::detail::plan_step_memory(in); }),
            "step memory plan: a unit of 2000 parameters in a model of 1024");
  EXPECT_EQ(cohort::testing::kind_of([&] { cohort::detail::plan_step_memory(in); }), "kind=invalid argument ranks=");
  in = input();
  in.optimizer_buffer_count = 0;
  EXPECT_EQ(cohort::testing::error_of([&] { cohort::detail::plan_step_memory(in); }),
            "step memory plan: buffer_count must be >= 1, got 0 and 5");
}

}  // namespace
}  // namespace step_memory_plan_test
