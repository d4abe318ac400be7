// Rank-prefixed logging to stderr; COHORT_LOG_LEVEL=error|warn|info|debug (default warn) sets what shows.
#pragma once

#include <string>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// The level read once from COHORT_LOG_LEVEL; an unknown value warns once and means warn.
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

}  // namespace cohort::detail

#define COHORT_LOG(level, ...)                                                                           \
  do {                                                                                                   \
    if (::cohort::detail::LogLevel::level <= ::cohort::detail::log_level())                              \
      ::cohort::detail::log_line(::cohort::detail::LogLevel::level, ::cohort::detail::str(__VA_ARGS__)); \
  } while (0)
#define COHORT_WARN(...) COHORT_LOG(kWarn, __VA_ARGS__)
#define COHORT_INFO(...) COHORT_LOG(kInfo, __VA_ARGS__)
#define COHORT_DEBUG(...) COHORT_LOG(kDebug, __VA_ARGS__)
