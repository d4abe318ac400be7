// Test helpers for ZeRO runs that must end at the same bits: an engine's full parameters in the
// module's order, and a comparison naming the first parameter that differs and by how much.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/zero.h"

namespace cohort::testing {

inline std::vector<torch::Tensor> parameters_of(cohort::ZeroEngineCore& engine) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, value] : engine.full_parameters()) out.push_back(value);
  return out;
}

inline void expect_equal_bits(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                              const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(got[i].equal(want[i])) << what << ", parameter " << i << ": max diff "
                                       << (got[i] - want[i]).abs().max().item<double>();
}

}  // namespace cohort::testing
