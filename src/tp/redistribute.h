// The collectives that move a tensor between placements over one Comm (redistribute_local) and the
// autograd function that makes them differentiable (redistribute_autograd): the gradient goes from
// the placement it arrives in to the input's, by the same table.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cohort/comm.h"
#include "cohort/dtensor.h"

namespace cohort::detail {

/// `local` (this rank's part of a tensor of `shape` laid out by `from`) laid out by `to`. No autograd
/// history. Throws cohort::Error (kInvalidArgument) for a move into Partial from anything else.
torch::Tensor redistribute_local(const torch::Tensor& local, Comm& comm, const std::vector<int64_t>& shape,
                                 const Placement& from, const Placement& to);

/// redistribute_local with a backward: the gradient, laid out by `grad_placement`, is redistributed
/// to `from` (to Replicate when `from` is Partial).
torch::Tensor redistribute_autograd(const torch::Tensor& local, const std::shared_ptr<Comm>& comm,
                                    const std::vector<int64_t>& shape, const Placement& from, const Placement& to,
                                    const Placement& grad_placement);

/// `shape` with `dim` replaced by the rows `rank` holds of it.
std::vector<int64_t> local_shape(std::vector<int64_t> shape, const Placement& placement, int ranks, int rank);

}  // namespace cohort::detail
