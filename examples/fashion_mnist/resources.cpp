// Resource checks of the Fashion-MNIST job (see resources.h).
#include "resources.h"

#include <cohort/error.h>
#include <cohort/number.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace fashion_mnist {
namespace {

// A number in a cgroup v2 file ("max" or absent: -1).
int64_t read_cgroup(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return cohort::parse_integer(text, {path, 0});
  } catch (const cohort::Error&) {
    return -1;
  }
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadChoice choose_threads(int requested, bool oversubscribe, int local_size) {
  const int cores = usable_cores();
  const int share = std::max(1, cores / std::max(1, local_size));
  if (requested == 0) return {share, ""};
  if (requested <= share || oversubscribe) return {requested, ""};
  std::ostringstream note;
  note << "note: --threads " << requested << " with " << local_size << " rank(s) on this node is more than the "
       << cores << " core(s) this process may use: using " << share << " per rank (--oversubscribe keeps "
       << requested << ")";
  return {share, note.str()};
}

int64_t estimated_step_bytes(int64_t batch) {
  // Per sample, in floats: the input (1x28x28), conv1 and its ReLU (2 x 32x26x26), conv2 and its ReLU
  // (2 x 64x24x24), the max pool's output and int64 indices (3 x 64x12x12), the linear layers (~276);
  // autograd keeps them all and backward makes a gradient of each. The CPU convolutions also unfold
  // their input (im2col: 9x26x26 and 288x24x24), forward and backward.
  const int64_t activations = 784 + 2 * 21632 + 2 * 36864 + 3 * 9216 + 276;
  const int64_t unfolded = 9 * 676 + 288 * 576;
  return batch * 4 * 2 * (activations + unfolded);
}

int64_t available_memory_bytes() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
  }
  const int64_t limit = read_cgroup("/sys/fs/cgroup/memory.max");
  const int64_t used = read_cgroup("/sys/fs/cgroup/memory.current");
  if (limit >= 0 && used >= 0) {
    const int64_t room = std::max<int64_t>(0, limit - used);
    available = available < 0 ? room : std::min(available, room);
  }
  return available;
}

std::string format_bytes(int64_t bytes) {
  char text[32];
  if (bytes >= 1000000000000) std::snprintf(text, sizeof text, "%.1f TB", bytes / 1e12);
  else if (bytes >= 1000000000) std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  else std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

std::string memory_refusal(const BatchRequest& request, int local_ranks, int64_t available) {
  const int64_t needed = estimated_step_bytes(request.samples);
  const int64_t per_rank = available / std::max(1, local_ranks);
  if (available < 0 || needed <= per_rank) return "";
  std::ostringstream out;
  out << request.flag << " " << request.asked;
  if (request.samples < request.asked) out << " (batches of " << request.samples << " samples on this rank)";
  out << " needs an estimated " << format_bytes(needed) << " per rank for one training step, more than the "
      << format_bytes(per_rank) << " available to each of the " << local_ranks << " rank(s) on this node: lower "
      << request.flag << ", or pass --no-memory-check to try anyway";
  return out.str();
}

}  // namespace fashion_mnist
