// The autograd function of SyncBatchNorm in training (PyTorch's torch.nn.modules._functions.SyncBatchNorm):
// forward all-gathers each rank's count, mean and invstd and normalizes with the whole batch's
// statistics; backward all-reduces sum_dy and sum_dy_xmu for the input gradient. The weight and bias
// gradients stay local sums: DDP (or any strategy) averages them as it does every gradient.
#pragma once

#include <torch/types.h>

#include <memory>

#include "cohort/comm.h"

namespace cohort::detail {

struct SyncBatchNormCall {
  std::shared_ptr<Comm> comm;
  torch::Tensor weight, bias;               // undefined without affine
  torch::Tensor running_mean, running_var;  // undefined: not updated
  double eps = 1e-5;
  double momentum = 0.1;  // the exponential average factor of this step
};

/// Training-mode SyncBatchNorm of `input` ([N, C, ...], N may be 0 on some ranks) over `call.comm`.
torch::Tensor sync_batch_norm(const torch::Tensor& input, const SyncBatchNormCall& call);

}  // namespace cohort::detail
