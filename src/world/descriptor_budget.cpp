// ensure_descriptors (see descriptor_budget.h).
#include "world/descriptor_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace cohort::detail {

int64_t world_sockets(int64_t ranks, int64_t local_ranks) {
  if (ranks <= 1) return 0;
  const int64_t local = local_ranks > 0 && local_ranks <= ranks && ranks % local_ranks == 0 ? local_ranks : 1;
  const int64_t hosts = ranks / local;
  return 2 * (ranks - 1) + 2 * (hosts - 1) + 2 * (local - 1) + 1;
}

DescriptorBudget ensure_descriptors(int64_t ranks, int64_t local_ranks) {
  DescriptorBudget budget;
  budget.need = world_sockets(ranks, local_ranks) + kDescriptorHeadroom;
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return budget;  // unknown: nothing to check against
  const auto as_count = [](rlim_t value) {
    return value == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(std::min<rlim_t>(value, INT64_MAX));
  };
  budget.soft = as_count(limit.rlim_cur);
  budget.hard = as_count(limit.rlim_max);
  const std::string what = "this rank of " + std::to_string(ranks) + " (" + std::to_string(local_ranks) +
                           " per host) needs about " + std::to_string(budget.need) +
                           " file descriptors (its world's sockets " +
                           std::to_string(budget.need - kDescriptorHeadroom) + " and " +
                           std::to_string(kDescriptorHeadroom) + " for files and groups)";
  COHORT_CHECK_KIND(kInvalidArgument, budget.need <= budget.hard, "cohort::init: ", what,
                    ", more than RLIMIT_NOFILE allows (soft ", budget.soft, ", hard ", budget.hard,
                    "): raise it in the job script (ulimit -n ", budget.need,
                    ") or ask the centre for a higher hard limit");
  // Groups open more as the job makes them, so the soft limit goes up to the hard one whenever it is
  // lower (Open MPI does the same), not only when the world alone needs it.
  if (budget.soft >= budget.hard) return budget;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    COHORT_CHECK_KIND(kInvalidArgument, budget.need <= budget.soft, "cohort::init: ", what,
                      ", and raising RLIMIT_NOFILE's soft limit ", budget.soft, " to its hard limit ", budget.hard,
                      " failed: ", std::strerror(errno));
    return budget;
  }
  budget.raised = true;
  return budget;
}

}  // namespace cohort::detail
