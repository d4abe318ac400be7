// What parallelize_module leaves on a layer it split: the tp Comm, the style, and the whole shape of
// the weight it cut (the layer's own options keep the whole sizes), plus the two autograd helpers
// every split layer uses on its replicated parameters and its inputs.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "cohort/comm.h"
#include "cohort/tensor_parallel.h"

namespace cohort::tp::detail {

struct Split {
  std::shared_ptr<Comm> comm;
  ParallelStyle style;
  std::vector<int64_t> weight_shape;  // before the cut
};

/// Megatron's f on a replicated tensor (a parameter used on sequence-split activations): identity
/// forward, the gradient summed over the ranks.
torch::Tensor sum_grad_over(const torch::Tensor& replicated, const std::shared_ptr<Comm>& comm);

/// `local` laid out by `from` (an even Shard, or Replicate) as `to`, the gradient coming back from
/// `grad` (see DTensor::redistribute).
torch::Tensor relayout(const torch::Tensor& local, const std::shared_ptr<Comm>& comm, const Placement& from,
                       const Placement& to, const Placement& grad);

}  // namespace cohort::tp::detail
