// Test helpers for ZeRO runs that must end at the same bits (or close to them): an engine's full
// parameters in the module's order, a comparison naming the first parameter that differs and by how
// much, and the largest difference from a reference's parameters by name.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
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

/// The largest absolute difference between the engine's full parameters and `reference`'s, by name.
inline double max_difference(cohort::ZeroEngineCore& engine, const std::map<std::string, torch::Tensor>& reference) {
  double worst = 0;
  for (const auto& [name, value] : engine.full_parameters())
    worst = std::max(worst, (value - reference.at(name)).abs().max().item<double>());
  return worst;
}

}  // namespace cohort::testing
