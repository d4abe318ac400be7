// The Python whose torch matches the LibTorch under test: COHORT_PYTHON (set by ctest from CMake's
// COHORT_PYTHON: Debian's python3 for 1.13, the venv's for pip's torch 2.x), else Debian's python3.
#pragma once

#include <cstdlib>
#include <string>

namespace cohort::testing {

inline std::string python_with_torch() {
  const char* python = std::getenv("COHORT_PYTHON");
  return python != nullptr && *python != '\0' ? python : "/usr/bin/python3";
}

}  // namespace cohort::testing
