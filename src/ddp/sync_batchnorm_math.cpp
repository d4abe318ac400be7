// SyncBatchNorm's per-kernel maths (see sync_batchnorm_math.h), in the order of PyTorch's CUDA kernels
// (aten/src/ATen/native/cuda/Normalization.cuh) so that results agree to rounding.
#include "ddp/sync_batchnorm_math.h"

#include <vector>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {
namespace {

// Every dimension but 1 (the channels): what the statistics reduce over.
std::vector<int64_t> reduced_dims(const torch::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A [C] tensor as [1, C, 1, ...] for broadcasting against the input.
torch::Tensor per_channel(const torch::Tensor& values, const torch::Tensor& input) {
  std::vector<int64_t> shape(size_t(input.dim()), 1);
  shape[1] = values.numel();
  return values.view(shape);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> batch_stats(const torch::Tensor& input, double eps) {
  auto [var, mean] = torch::var_mean(input, reduced_dims(input), /*unbiased=*/false, /*keepdim=*/false);
  return {mean, (var + eps).rsqrt()};
}

GatheredStats merge_stats(const torch::Tensor& gathered, int64_t channels, torch::Tensor running_mean,
                          torch::Tensor running_var, double momentum, double eps) {
  torch::NoGradGuard no_grad;
  auto avg = torch::zeros({channels}, gathered.options());
  auto var_n = torch::zeros({channels}, gathered.options());
  double n = 0;
  const auto counts = gathered.select(1, 2 * channels).to(torch::kDouble).cpu();
  for (int64_t rank = 0; rank < gathered.size(0); ++rank) {
    const double count = counts[rank].item<double>();
    if (count < 1) continue;  // an empty batch: in the allgather, not in the statistics
    const auto mean = gathered[rank].narrow(0, 0, channels);
    const auto invstd = gathered[rank].narrow(0, channels, channels);
    const auto v = (invstd.reciprocal().square() - eps) * count;
    const double factor = 1.0 / (n + count);
    var_n += v + (avg - mean).square() * (n * count * factor);
    avg = avg * (n * factor) + mean * (count * factor);
    n += count;
  }
  COHORT_CHECK_KIND(kInvalidArgument, n > 0, "SyncBatchNorm: every rank's batch is empty (", gathered.size(0),
                    " ranks, 0 rows): there are no batch statistics to normalize with");
  if (running_mean.defined())
    running_mean.copy_(running_mean * (1 - momentum) + avg.to(running_mean.dtype()) * momentum);
  if (running_var.defined())
    running_var.copy_(running_var * (1 - momentum) + (var_n / (n - 1)).to(running_var.dtype()) * momentum);
  return {avg, (var_n / n + eps).rsqrt(), n};
}

torch::Tensor normalize(const torch::Tensor& input, const torch::Tensor& mean, const torch::Tensor& invstd,
                        const torch::Tensor& weight, const torch::Tensor& bias) {
  auto out = (input - per_channel(mean, input)) * per_channel(invstd, input);
  if (weight.defined()) out = out * per_channel(weight, input);
  if (bias.defined()) out = out + per_channel(bias, input);
  return out.to(input.dtype());
}

std::pair<torch::Tensor, torch::Tensor> backward_sums(const torch::Tensor& grad_out, const torch::Tensor& input,
                                                      const torch::Tensor& mean) {
  const auto dims = reduced_dims(input);
  const auto sum_dy = grad_out.sum(dims);
  const auto sum_dy_xmu = (grad_out * (input - per_channel(mean, input))).sum(dims);
  return {sum_dy, sum_dy_xmu};
}

torch::Tensor input_grad(const torch::Tensor& grad_out, const torch::Tensor& input, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& weight, const GradSums& sums) {
  const double norm = 1.0 / sums.count;
  const auto grad_mean = sums.sum_dy * norm;
  const auto proj_scale = sums.sum_dy_xmu * norm * invstd * invstd;
  const auto grad_scale = weight.defined() ? invstd * weight : invstd;
  const auto xmu = input - per_channel(mean, input);
  return ((grad_out - per_channel(grad_mean, input) - xmu * per_channel(proj_scale, input)) *
          per_channel(grad_scale, input))
      .to(input.dtype());
}

}  // namespace cohort::detail
