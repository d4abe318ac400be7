// What every GPU test shares: the skip with a one-line reason on a machine without a usable GPU
// (CI never has one; scripts/test-gpu.sh runs these where there is).
#pragma once

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "cohort_config.h"

// Skips the test, saying why, unless this build has CUDA and a device is visible.
#define COHORT_REQUIRE_GPU()                                                                        \
  do {                                                                                              \
    if (!COHORT_WITH_CUDA) GTEST_SKIP() << "skipped: this cohort was built without CUDA";           \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "skipped: no CUDA device is visible";         \
  } while (0)
