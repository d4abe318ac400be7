// Broadcast of many tensors (parameters at DDP construction, buffers after each step) as one flat
// buffer per dtype and device: one collective instead of one per tensor.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

/// Copies `root`'s values of `tensors` into every rank's, in place (without recording autograd).
void broadcast_coalesced(Comm& comm, const std::vector<torch::Tensor>& tensors, int root);

}  // namespace cohort::detail
