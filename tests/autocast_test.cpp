// AutocastGuard on the CPU (bfloat16): eligible ops run in bfloat16 inside the guard only, the guard
// nests and restores what was there, and bad requests are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/autocast.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace autocast_test {

namespace {

using cohort::testing::error_of;
using ::testing::HasSubstr;

TEST(AutocastGuard, LinearRunsInBfloat16InsideTheGuardOnly) {
  torch::nn::Linear linear(8, 4);
  auto x = torch::randn({2, 8});
  {
    cohort::AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(linear(x).scalar_type(), torch::kBFloat16);
    {
      cohort::AutocastGuard nested(torch::kCPU, torch::kBFloat16);
      EXPECT_EQ(linear(x).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(linear(x).scalar_type(), torch::kBFloat16) << "the inner guard turned the outer one off";
  }
  EXPECT_EQ(linear(x).scalar_type(), torch::kFloat);
}

TEST(AutocastGuard, GradientsReachFloat32Parameters) {
  torch::nn::Linear linear(8, 4);
  torch::Tensor loss;
  {
    cohort::AutocastGuard autocast(torch::kCPU, torch::kBFloat16);
    loss = linear(torch::randn({2, 8})).to(torch::kFloat).pow(2).mean();
  }
  loss.backward();
  EXPECT_EQ(linear->weight.grad().scalar_type(), torch::kFloat);
  EXPECT_GT(linear->weight.grad().abs().sum().item<double>(), 0);
}

TEST(AutocastGuard, BadRequestsAreNamed) {
  EXPECT_THAT(error_of([] { cohort::AutocastGuard g(torch::kCPU, torch::kHalf); }),
              HasSubstr("CPU autocast runs in bfloat16, not float16"));
  EXPECT_THAT(error_of([] { cohort::AutocastGuard g(torch::kCPU, torch::kFloat); }),
              HasSubstr("is not a low-precision type (bfloat16 or float16)"));
}

}  // namespace

}  // namespace autocast_test
