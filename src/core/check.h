// COHORT_CHECK and detail::str: how cohort's own code raises a cohort::Error in one line. Internal:
// programs using cohort throw cohort::Error themselves (include/cohort/error.h); every layer and
// cohort's tests, tools and benchmarks include this.
#pragma once

#include <sstream>
#include <string>

#include "cohort/error.h"

namespace cohort::detail {

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace cohort::detail

/// Throws cohort::Error with the streamed arguments as message when `cond` is false.
#define COHORT_CHECK(cond, ...)                                             \
  do {                                                                      \
    if (!(cond)) throw ::cohort::Error(::cohort::detail::str(__VA_ARGS__)); \
  } while (0)

/// COHORT_CHECK for an error of a known kind: COHORT_CHECK_KIND(kInvalidArgument, n > 0, "n=", n, ...).
#define COHORT_CHECK_KIND(kind, cond, ...)                                                             \
  do {                                                                                                 \
    if (!(cond)) throw ::cohort::Error(::cohort::detail::str(__VA_ARGS__), ::cohort::ErrorKind::kind); \
  } while (0)
