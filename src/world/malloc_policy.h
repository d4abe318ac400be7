// The allocator policy cohort::init() applies: glibc malloc keeps freed blocks for reuse instead of
// handing them back to the kernel, so a training step does not page-fault its activations in again
// on every step (docs/BENCHMARKS.md has the fault counts). COHORT_MALLOC_TUNING=0 turns it off, and
// a user who set malloc tunables in GLIBC_TUNABLES (or MALLOC_*_ variables) keeps their own.
#pragma once

#include <cstddef>
#include <string>

namespace cohort::detail {

/// Allocations below this come from malloc's heap (glibc's default: 128 KiB, rising to 32 MiB).
inline constexpr size_t kMallocMmapThreshold = size_t(64) << 20;
/// Freed memory at the heap's top stays in the process up to this (glibc's default: 128 KiB).
inline constexpr size_t kMallocTrimThreshold = size_t(256) << 20;

/// What apply_malloc_policy() did, in words for the info log.
struct MallocPolicyResult {
  bool applied = false;
  std::string reason;
};

/// Sets the thresholds with mallopt unless COHORT_MALLOC_TUNING=0 or the environment already sets
/// malloc tunables. Throws cohort::Error for a COHORT_MALLOC_TUNING other than 0 or 1.
MallocPolicyResult apply_malloc_policy();

/// Hands the free memory inside malloc's heap back to the kernel (glibc's malloc_trim; elsewhere a
/// no-op). For the moment a large structure was just freed and will not come back, such as a whole
/// model's parameters once they are sharded: the policy above would otherwise keep it resident.
void return_free_memory();

}  // namespace cohort::detail
