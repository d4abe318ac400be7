// Resource checks of the Fashion-MNIST job (see resources.h).
#include "resources.h"

#include <sched.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "../common/memory.h"

namespace fashion_mnist {

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

std::string memory_refusal(const BatchRequest& request, int local_ranks, int64_t available) {
  std::ostringstream asked;
  asked << request.flag << " " << request.asked;
  if (request.samples < request.asked) asked << " (batches of " << request.samples << " samples on this rank)";
  return examples::memory_refusal(
      {asked.str(), estimated_step_bytes(request.samples), "for one training step", "lower " + request.flag},
      local_ranks, available);
}

}  // namespace fashion_mnist
