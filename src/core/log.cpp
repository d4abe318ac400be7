// Rank-prefixed logging: one write(2) per line so lines from threads and ranks never interleave.
#include "core/log.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace cohort::detail {
namespace {

LogLevel parse_level() {
  const char* raw = std::getenv("COHORT_LOG_LEVEL");
  if (raw == nullptr || *raw == '\0') return LogLevel::kWarn;
  const std::string value(raw);
  if (value == "error") return LogLevel::kError;
  if (value == "warn" || value == "warning") return LogLevel::kWarn;
  if (value == "info") return LogLevel::kInfo;
  if (value == "debug") return LogLevel::kDebug;
  const std::string line = "[cohort] warning: COHORT_LOG_LEVEL=" + value +
                           " is not one of error, warn, info, debug; using warn\n";
  (void)!::write(2, line.data(), line.size());
  return LogLevel::kWarn;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

}  // namespace

LogLevel log_level() {
  static const LogLevel level = parse_level();
  return level;
}

void log_line(LogLevel level, const std::string& message) {
  std::string line = "[cohort] " + rank_prefix() + level_name(level) + ": " + message + "\n";
  (void)!::write(2, line.data(), line.size());
}

}  // namespace cohort::detail
