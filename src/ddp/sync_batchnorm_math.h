// The maths of SyncBatchNorm as pure functions, one per kernel PyTorch's SyncBatchNorm calls
// (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
// batch_norm_backward_elemt: CUDA-only in PyTorch); written with tensor ops so they run on any device.
// Statistics are per channel, dimension 1 of an [N, C, ...] input; mean and invstd are [C].
#pragma once

#include <torch/types.h>

#include <utility>

namespace cohort::detail {

/// This rank's (mean, invstd) with the biased variance: invstd = 1 / sqrt(var + eps).
std::pair<torch::Tensor, torch::Tensor> batch_stats(const torch::Tensor& input, double eps);

struct GatheredStats {
  torch::Tensor mean, invstd;  // of the whole batch, [C]
  double count = 0;            // rows x positions over every rank
};

/// Merges every rank's [W, 2C + 1] (mean, invstd, count) rows, rank by rank as PyTorch's kernel does
/// (ranks with count 0 left out), and updates running_mean / running_var (unbiased) when defined.
GatheredStats merge_stats(const torch::Tensor& gathered, int64_t channels, torch::Tensor running_mean,
                          torch::Tensor running_var, double momentum, double eps);

/// weight * (input - mean) * invstd + bias, the weight and bias optional.
torch::Tensor normalize(const torch::Tensor& input, const torch::Tensor& mean, const torch::Tensor& invstd,
                        const torch::Tensor& weight, const torch::Tensor& bias);

/// (sum over all but dim 1 of grad_out, and of grad_out * (input - mean)).
std::pair<torch::Tensor, torch::Tensor> backward_sums(const torch::Tensor& grad_out, const torch::Tensor& input,
                                                      const torch::Tensor& mean);

struct GradSums {
  torch::Tensor sum_dy, sum_dy_xmu;  // over every rank, [C]
  double count = 0;                  // as in GatheredStats
};

/// The input gradient from the global sums: (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n)
/// * invstd * weight.
torch::Tensor input_grad(const torch::Tensor& grad_out, const torch::Tensor& input, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& weight, const GradSums& sums);

}  // namespace cohort::detail
