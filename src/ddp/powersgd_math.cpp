// PowerSGD's arithmetic (see powersgd_math.h). Written from the algorithm of Vogels et al. 2019 and the
// behaviour of PyTorch's powerSGD_hook.py (same decisions, same random draws for the same seed).
#include "ddp/powersgd_math.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

namespace cohort::detail {

bool should_compress(int64_t rows, int64_t cols, int64_t rank, double min_rate) {
  return double((rows + cols) * rank) * min_rate < double(rows * cols);
}

namespace {

void gram_schmidt(torch::Tensor& batch, double epsilon) {
  const int64_t columns = batch.size(2);
  for (int64_t i = 0; i < columns; ++i) {
    torch::Tensor column = batch.narrow(2, i, 1);
    const std::vector<int64_t> rows{1};
    const torch::Tensor norm = at::linalg_vector_norm(column, 2, rows, /*keepdim=*/true);
    if (epsilon == 0) {
      column.div_(norm);
      column.masked_fill_(norm == 0, 0);  // PyTorch meant to turn 0/0 into 0 (its ZeroDivisionError branch)
    } else {
      column.div_(norm + epsilon);
    }
    if (i + 1 == columns) break;
    torch::Tensor rest = batch.narrow(2, i + 1, columns - i - 1);
    rest.sub_((column * rest).sum(1, /*keepdim=*/true) * column);
  }
}

}  // namespace

void orthogonalize(torch::Tensor batch, double epsilon) {
  TORCH_INTERNAL_ASSERT(batch.dim() == 3 && batch.size(2) <= batch.size(1));
  const bool half = batch.scalar_type() == torch::kHalf || batch.scalar_type() == torch::kBFloat16;
  if (batch.size(2) <= 2 || half) {
    gram_schmidt(batch, epsilon);
    return;
  }
  batch.copy_(std::get<0>(at::linalg_qr(batch)));
}

int64_t draw_seed(std::mt19937& rng) {
  // randint(high) draws from [0, high - 1]: numpy masks 32-bit outputs to the smallest all-ones mask
  // covering the range and rejects values above it.
  constexpr uint32_t kRange = 1000000000u - 1u;
  uint32_t mask = kRange;
  for (int shift = 1; shift < 32; shift *= 2) mask |= mask >> shift;
  uint32_t value = 0;
  do {
    value = uint32_t(rng()) & mask;
  } while (value > kRange);
  return int64_t(value);
}

void fill_standard_normal(const std::vector<torch::Tensor>& qs, int64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(uint64_t(seed));
  for (const auto& q : qs) {
    const auto options = torch::TensorOptions().dtype(q.scalar_type());
    q.copy_(torch::randn(q.sizes(), generator, options));
  }
}

int64_t square_side(int64_t numel) {
  int64_t side = int64_t(std::sqrt(double(numel)));
  while (side * side < numel) ++side;
  while (side > 0 && (side - 1) * (side - 1) >= numel) --side;
  return side;
}

}  // namespace cohort::detail
