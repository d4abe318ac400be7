// File descriptors a rank needs, counted before it opens any (issue 43): every Comm opens a TCP mesh
// twice (Gloo's pair per peer and cohort's control plane) plus the links of its hierarchical
// collectives, so the world alone takes 2(N-1) + 2(H-1) + 2(L-1) + 1 sockets on N ranks over H hosts
// of L, and groups, files and the runtime take more. Past RLIMIT_NOFILE a rank would fail mid-way
// through connecting (EMFILE, with every peer waiting on it); instead the soft limit is raised to the
// hard one, and a hard limit below the need stops init in one line naming the limit and the need.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::detail {

/// Descriptors set aside beyond the world's sockets: the standard streams, the store's connection,
/// log and checkpoint files, shared-memory segments and a few groups' links.
constexpr int64_t kDescriptorHeadroom = 64;

/// The world Comm's sockets per rank on `ranks` ranks with `local_ranks` on each host.
int64_t world_sockets(int64_t ranks, int64_t local_ranks);

/// The limits a check saw and what it did: `raised` when the soft limit went up to meet `need`.
struct DescriptorBudget {
  int64_t need = 0;
  int64_t soft = 0;
  int64_t hard = 0;
  bool raised = false;
};

/// Checks RLIMIT_NOFILE against the need of a rank of `ranks` (`local_ranks` per host): throws
/// kInvalidArgument in one line when the hard limit is below it; else raises the soft limit to the
/// hard one (groups open more as the job makes them).
DescriptorBudget ensure_descriptors(int64_t ranks, int64_t local_ranks);

}  // namespace cohort::detail
