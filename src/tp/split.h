// The two autograd helpers every split layer (cohort/tensor_parallel.h) uses on its replicated
// parameters and its inputs.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "cohort/comm.h"
#include "cohort/tensor_parallel.h"

namespace cohort::tp::detail {

/// Megatron's f on a replicated tensor (a parameter used on sequence-split activations): identity
/// forward, the gradient summed over the ranks.
torch::Tensor sum_grad_over(const torch::Tensor& replicated, const std::shared_ptr<Comm>& comm);

/// `local` laid out by `from` (an even Shard, or Replicate) as `to`, the gradient coming back from
/// `grad` (see DTensor::redistribute).
torch::Tensor relayout(const torch::Tensor& local, const std::shared_ptr<Comm>& comm, const Placement& from,
                       const Placement& to, const Placement& grad);

}  // namespace cohort::tp::detail
