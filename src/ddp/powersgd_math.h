// The arithmetic of PowerSGD (powersgd.cpp), as pure functions testable alone: which tensors are worth
// compressing, the orthogonalization of a batch of column blocks, and the seeds of the random initial
// Qs drawn as PyTorch draws them (numpy's RandomState(seed).randint(10**9), then torch.manual_seed).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>

namespace cohort::detail {

/// PyTorch's _should_compress: (rows + cols) * rank * min_rate < rows * cols.
bool should_compress(int64_t rows, int64_t cols, int64_t rank, double min_rate);

/// Makes the columns of each matrix of `batch` ([b, n, r], r <= n) orthonormal, in place:
/// Gram-Schmidt for r <= 2 or a 16-bit dtype, else QR (as PyTorch's _orthogonalize). Each column is
/// divided by its norm + epsilon; a column of zeros (norm 0, epsilon 0) becomes zeros, not NaN.
void orthogonalize(torch::Tensor batch, double epsilon);

/// numpy.random.RandomState(seed).randint(1_000_000_000) for a generator made as
/// std::mt19937(seed): numpy's legacy seeding and masked rejection sampling give the same draws.
int64_t draw_seed(std::mt19937& rng);

/// Fills each of `qs` in turn from a CPU generator seeded with `seed` (standard normal, then copied to
/// the tensor's device and dtype), as torch.manual_seed(seed) followed by torch.randn per Q.
void fill_standard_normal(const std::vector<torch::Tensor>& qs, int64_t seed);

/// The side of the square matrix batched PowerSGD folds `numel` elements into: ceil(sqrt(numel)).
int64_t square_side(int64_t numel);

}  // namespace cohort::detail
