// Variable-size allgather as per-rank parts: every rank's tensor (first dimensions may differ, the rest
// must match), in rank order. Comm::allgather_v concatenates them; the checkpoint's string exchange and
// DDP's parameter check decode each rank's part on its own.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

/// Every rank's `tensor`, in rank order (a world of one: {tensor}). Collective.
std::vector<torch::Tensor> allgather_ragged(Comm& comm, const torch::Tensor& tensor);

}  // namespace cohort::detail
