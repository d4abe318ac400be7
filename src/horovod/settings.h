// Horovod's environment variables as cohort::hvd reads them at init(): the ones that still mean
// something (fusion threshold, cycle time, cache capacity, stall check; and cohort's COHORT_HVD_ORDERED)
// are parsed through cohort/number.h, and any other HOROVOD_* that is set is named once in a warning
// instead of being silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::hvd::detail {

struct Settings {
  /// HOROVOD_FUSION_THRESHOLD: bytes per fused gradient group of DistributedOptimizer (0: one
  /// allreduce per gradient). Horovod's default since 0.21: 128 MiB.
  int64_t fusion_threshold_bytes = int64_t(128) << 20;
  /// HOROVOD_CYCLE_TIME in ms: how long the controller waits after a negotiation round that started
  /// nothing (other ranks had not submitted yet) before the next; a new submission ends the wait.
  double cycle_time_ms = 1.0;
  /// HOROVOD_STALL_CHECK_TIME_SECONDS (default 60): after this long waiting, a warning names the ranks
  /// that have not submitted and the tensors; 0 or HOROVOD_STALL_CHECK_DISABLE=1 turns it off.
  double stall_check_seconds = 60.0;
  /// HOROVOD_CACHE_CAPACITY: names the response cache keeps (controller.h); 0 negotiates every name
  /// in full each time.
  int64_t cache_capacity = 1024;
  /// COHORT_HVD_ORDERED=1: no negotiation; operations start as they are submitted, so every rank must
  /// submit them in the same order (as torch.distributed), saving the round per cycle.
  bool ordered = false;
};

/// The settings from the environment; throws cohort::Error naming a variable with a bad value.
Settings read_settings();

/// The HOROVOD_* names among `environment` ("NAME=value" entries) that cohort::hvd does not honour,
/// sorted.
std::vector<std::string> unsupported_variables(const std::vector<std::string>& environment);

/// Warns once per process, naming every unsupported HOROVOD_* variable that is set.
void warn_unsupported_variables();

}  // namespace cohort::hvd::detail
