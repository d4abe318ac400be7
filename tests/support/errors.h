// Test helper: the message of the cohort::Error a body throws (and a test failure when it throws none).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cohort/error.h"

namespace cohort::testing {

inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const cohort::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected cohort::Error";
  return "";
}

}  // namespace cohort::testing
