// Horovod's environment variables (see settings.h).
#include "horovod/settings.h"

#include <unistd.h>  // environ (declared by glibc with _GNU_SOURCE, which g++ defines)

#include <algorithm>
#include <atomic>
#include <set>

#include "cohort/number.h"
#include "core/log.h"

namespace cohort::hvd::detail {
namespace {

// What cohort::hvd honours (HOROVOD_TIMELINE: the timeline, docs/timeline.md).
const std::set<std::string> kHonoured = {"HOROVOD_FUSION_THRESHOLD",         "HOROVOD_CYCLE_TIME",
                                         "HOROVOD_CACHE_CAPACITY",           "HOROVOD_TIMELINE",
                                         "HOROVOD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_DISABLE"};

}  // namespace

Settings read_settings() {
  Settings settings;
  settings.fusion_threshold_bytes = cohort::env_integer(
      {"HOROVOD_FUSION_THRESHOLD", 0, int64_t(1) << 40, "a number of bytes"}, settings.fusion_threshold_bytes);
  settings.cycle_time_ms = cohort::env_real({"HOROVOD_CYCLE_TIME", 0, 1e6, "a number of milliseconds"},
                                            settings.cycle_time_ms);
  settings.stall_check_seconds = cohort::env_real({"HOROVOD_STALL_CHECK_TIME_SECONDS", 0, 86400, "a number of seconds"},
                                                  settings.stall_check_seconds);
  if (cohort::env_integer({"HOROVOD_STALL_CHECK_DISABLE", 0, 1, "a switch (1: no stall check)"}, 0) == 1)
    settings.stall_check_seconds = 0;
  settings.cache_capacity = cohort::env_integer({"HOROVOD_CACHE_CAPACITY", 0, 1 << 20, "a number of names"},
                                                settings.cache_capacity);
  settings.ordered = cohort::env_integer({"COHORT_HVD_ORDERED", 0, 1, "a switch (1: no negotiation)"}, 0) == 1;
  return settings;
}

std::vector<std::string> unsupported_variables(const std::vector<std::string>& environment) {
  std::vector<std::string> names;
  for (const auto& entry : environment) {
    if (entry.rfind("HOROVOD_", 0) != 0) continue;
    std::string name = entry.substr(0, entry.find('='));
    if (!kHonoured.count(name)) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

void warn_unsupported_variables() {
  static std::atomic<bool> warned{false};
  std::vector<std::string> environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) environment.emplace_back(*entry);
  const auto names = unsupported_variables(environment);
  if (names.empty() || warned.exchange(true)) return;
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + names[i];
  COHORT_WARN("cohort::hvd ignores ", list,
              ": not supported (cohort::hvd honours HOROVOD_FUSION_THRESHOLD, "
              "HOROVOD_CYCLE_TIME, HOROVOD_CACHE_CAPACITY, HOROVOD_TIMELINE, HOROVOD_STALL_CHECK_TIME_SECONDS and "
              "HOROVOD_STALL_CHECK_DISABLE; see docs/horovod.md)");
}

}  // namespace cohort::hvd::detail
