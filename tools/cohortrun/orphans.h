// The workers' descendants that outlive them. cohortrun is their subreaper (PR_SET_CHILD_SUBREAPER):
// a grandchild that left its worker's process group (setsid, a daemon's double fork) is re-parented
// to cohortrun instead of init when its parent dies, so it can be found here and ended with the
// workers instead of running on after the job.
#pragma once

#include <sys/types.h>

#include <set>
#include <vector>

namespace cohort::detail::launch {

/// Makes this process the subreaper of its descendants (idempotent; a no-op where unsupported).
void become_subreaper();

/// This process's children, from /proc (the workers and any orphan re-parented to it).
std::vector<pid_t> child_pids();

/// Collects the exit status of every child not in `workers` that has ended (non-blocking).
void reap_orphans(const std::set<pid_t>& workers);

/// Ends every child not in `workers` once the workers are gone: SIGTERM (and SIGCONT, for a stopped
/// one) to it and its process group, SIGKILL after `grace_seconds`, each reaped. Orphans they leave
/// are re-parented here in turn and ended too.
void end_orphans(const std::set<pid_t>& workers, double grace_seconds);

}  // namespace cohort::detail::launch
