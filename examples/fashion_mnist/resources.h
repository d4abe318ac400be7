// What the job may ask of this machine, checked before anything large is allocated: threads against
// the cores this process may use, one step's estimated memory against the memory available (checked
// as every example does, examples/common/memory.h), and a data set that is not empty. Each refusal
// says what it refuses, why, and the flag that overrides it.
#pragma once

#include <cstdint>
#include <string>

namespace fashion_mnist {

/// Cores this process may run on (its affinity mask, as taskset and Slurm set it).
int usable_cores();

struct ThreadChoice {
  int threads = 1;
  std::string note;  ///< "" or why --threads was lowered (printed by rank 0)
};

/// --threads (0: the usable cores shared by the node's ranks, at least 1). More threads per rank than
/// usable_cores() / local_size are lowered to that, with a note, unless `oversubscribe`.
ThreadChoice choose_threads(int requested, bool oversubscribe, int local_size);

/// Estimated bytes one training step of `batch` samples of the example's CNN takes on the CPU: the
/// activations autograd keeps, their gradients and the convolutions' unfolded inputs (im2col).
int64_t estimated_step_bytes(int64_t batch);

/// The batch a step will really have: `asked` by `flag`, `samples` once this rank's share of the
/// training set caps it.
struct BatchRequest {
  std::string flag;  ///< "--batch-size" or "the ds_config's train_micro_batch_size_per_gpu"
  int64_t asked = 0;
  int64_t samples = 0;
};

/// "" when a step of request.samples fits in `available` bytes shared by `local_ranks` ranks, else
/// the refusal, naming the flag, the estimate, the memory and the override (examples/common/memory.h).
std::string memory_refusal(const BatchRequest& request, int local_ranks, int64_t available);

}  // namespace fashion_mnist
