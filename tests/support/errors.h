// Test helpers: the message of the cohort::Error a body throws (and a test failure when it throws none),
// and an error's kind and ranks as one line ("kind=peer died ranks=3") that a rank process reports.
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

/// "kind=<error_kind_name> ranks=<r,r,...>": what a caller deciding whether to retry reads.
inline std::string kind_line(const cohort::Error& error) {
  std::string ranks;
  for (int r : error.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  return std::string("kind=") + cohort::error_kind_name(error.kind()) + " ranks=" + ranks;
}

/// kind_line of the error `body` throws (and a test failure when it throws none).
inline std::string kind_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const cohort::Error& error) {
    return kind_line(error);
  }
  ADD_FAILURE() << "expected cohort::Error";
  return "";
}

}  // namespace cohort::testing
