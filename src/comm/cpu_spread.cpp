// See cpu_spread.h.
#include "comm/cpu_spread.h"

#include <sched.h>

#include <algorithm>

namespace cohort::detail {

void CpuSpread::move_off(int here, const std::vector<int>& used, int offset) {
  if (!due()) return;
  last_ = std::chrono::steady_clock::now();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int count = CPU_SETSIZE;
  for (int i = 0; i < count; ++i) {
    const int cpu = (offset + i) % count;
    if (cpu == here || !CPU_ISSET(cpu, &allowed) || std::count(used.begin(), used.end(), cpu) > 0) continue;
    cpu_set_t target;
    CPU_ZERO(&target);
    CPU_SET(cpu, &target);
    // Leaving a mask that excludes the current CPU migrates the thread before the call returns.
    if (sched_setaffinity(0, sizeof(target), &target) == 0) sched_setaffinity(0, sizeof(allowed), &allowed);
    return;
  }
}

}  // namespace cohort::detail
