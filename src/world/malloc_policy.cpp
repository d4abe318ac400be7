// glibc returns freed blocks above the mmap threshold to the kernel at once (munmap) and trims the
// heap's free top above the trim threshold, so every step's activations come back as fresh pages,
// each one a page fault. Larger thresholds keep them; the cost is memory held after a peak.
#include "world/malloc_policy.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cohort/number.h"

namespace cohort::detail {
namespace {

// The user's own malloc settings, if any: glibc reads these at start-up, and we leave them alone.
const char* user_malloc_setting() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return "GLIBC_TUNABLES";
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(name) != nullptr) return name;
  return nullptr;
}

}  // namespace

MallocPolicyResult apply_malloc_policy() {
  const bool wanted = env_integer({"COHORT_MALLOC_TUNING", 0, 1,
                                   "a switch (0: glibc's defaults, 1: keep freed memory, the default)"},
                                  1) == 1;
  if (!wanted) return {false, "COHORT_MALLOC_TUNING=0: malloc keeps glibc's defaults"};
  if (const char* setting = user_malloc_setting())
    return {false, std::string(setting) + " sets malloc's tunables: cohort leaves malloc as they say"};
#if defined(__GLIBC__)
  if (mallopt(M_MMAP_THRESHOLD, int(kMallocMmapThreshold)) != 1 ||
      mallopt(M_TRIM_THRESHOLD, int(kMallocTrimThreshold)) != 1)
    return {false, "this glibc refused mallopt(M_MMAP_THRESHOLD 64 MiB, M_TRIM_THRESHOLD 256 MiB): defaults kept"};
  return {true,
          "malloc: M_MMAP_THRESHOLD=64 MiB, M_TRIM_THRESHOLD=256 MiB (freed blocks are reused, not faulted in again "
          "each step; up to 256 MiB of freed memory stays in the process; COHORT_MALLOC_TUNING=0 turns this off)"};
#else
  return {false, "not glibc: malloc keeps its defaults"};
#endif
}

void return_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace cohort::detail
