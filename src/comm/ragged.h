// Variable-size allgather as per-rank parts: every rank's tensor (first dimensions may differ, the rest
// must match), in rank order. Comm::allgather_v concatenates them; the checkpoint's string exchange and
// DDP's parameter check decode each rank's part on its own.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

/// Every rank's `tensor`, in rank order (a world of one: {tensor}). Collective.
std::vector<torch::Tensor> allgather_ragged(Comm& comm, const torch::Tensor& tensor);

/// The same in two halves: the row counts are exchanged in the call (it returns once every rank made
/// it), the rows move in the background; parts() gives every rank's tensor once work finished.
struct RaggedGather {
  Work work;
  std::function<std::vector<torch::Tensor>()> parts;
};
RaggedGather allgather_ragged_async(Comm& comm, const torch::Tensor& tensor);

}  // namespace cohort::detail
