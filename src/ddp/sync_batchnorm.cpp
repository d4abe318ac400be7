// cohort::SyncBatchNorm, the module (include/cohort/sync_batchnorm.h): PyTorch's SyncBatchNorm.forward
// step for step. Training with a Comm of several ranks goes through the synchronising autograd function
// (sync_batchnorm_function.h); a world of one, eval mode and untracked statistics in eval use LibTorch's
// batch_norm, as PyTorch falls back to F.batch_norm.
#include "cohort/sync_batchnorm.h"

#include <torch/nn/init.h>
#include <torch/torch.h>

#include "cohort/error.h"
#include "core/check.h"
#include "ddp/sync_batchnorm_function.h"
#include "world/resolve_comm.h"

namespace cohort {

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_) : SyncBatchNormImpl(std::move(options_), {}) {}

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_, detail::SyncBatchNormState adopt)
    : options(std::move(options_)), adopt_(std::move(adopt)) {
  COHORT_CHECK_KIND(kInvalidArgument, options.num_features() > 0,
                    "SyncBatchNormOptions: num_features must be positive, got ", options.num_features());
  COHORT_CHECK_KIND(kInvalidArgument, options.eps() > 0, "SyncBatchNormOptions: eps must be positive, got ",
                    options.eps());
  reset();
}

void SyncBatchNormImpl::reset() {
  const auto fresh = [&](torch::Tensor adopted, torch::Tensor made) { return adopted.defined() ? adopted : made; };
  const int64_t c = options.num_features();
  const bool adopting = adopt_.weight.defined() || adopt_.running_mean.defined();
  if (options.affine()) {
    auto w = fresh(adopt_.weight, torch::ones({c})), b = fresh(adopt_.bias, torch::zeros({c}));
    weight = register_parameter("weight", w, !adopt_.weight.defined() || w.requires_grad());
    bias = register_parameter("bias", b, !adopt_.bias.defined() || b.requires_grad());
  } else {
    weight = register_parameter("weight", torch::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", fresh(adopt_.running_mean, torch::zeros({c})));
    running_var = register_buffer("running_var", fresh(adopt_.running_var, torch::ones({c})));
    num_batches_tracked = register_buffer("num_batches_tracked",
                                          fresh(adopt_.num_batches_tracked, torch::tensor(int64_t(0), torch::kLong)));
  } else {
    running_mean = register_buffer("running_mean", torch::Tensor());
    running_var = register_buffer("running_var", torch::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", torch::Tensor());
  }
  adopt_ = {};  // taken over once; clone() and a later reset() make fresh tensors
  if (!adopting) reset_parameters();
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::nn::init::ones_(weight);
  torch::nn::init::zeros_(bias);
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "cohort::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum().has_value()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << std::boolalpha << options.affine()
         << ", track_running_stats=" << options.track_running_stats() << ")";
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  COHORT_CHECK_KIND(kInvalidArgument, input.dim() >= 2, "SyncBatchNorm: expected at least 2D input (got ", input.dim(),
                    "D input)");
  COHORT_CHECK_KIND(kInvalidArgument, input.size(1) == options.num_features(), "SyncBatchNorm: the input of shape ",
                    input.sizes(), " has ", input.size(1), " channels (dimension 1), but num_features is ",
                    options.num_features());
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!options.momentum().has_value()) factor = 1.0 / num_batches_tracked.item<double>();  // cumulative
  }
  // Batch statistics in training, and in eval when there are no running statistics to use.
  const bool batch_statistics = is_training() || !running_mean.defined();
  const bool use_running = !is_training() || options.track_running_stats();
  const auto mean = use_running ? running_mean : torch::Tensor(), var = use_running ? running_var : torch::Tensor();
  std::shared_ptr<Comm> comm;
  if (batch_statistics && is_training()) comm = detail::resolve_comm(options.comm(), "SyncBatchNorm");
  if (comm == nullptr || comm->size() == 1) {
    return torch::batch_norm(input, weight, bias, mean, var, batch_statistics, factor, options.eps(),
                             at::globalContext().userEnabledCuDNN());
  }
  detail::SyncBatchNormCall call{comm, weight, bias, mean, var, options.eps(), factor};
  return detail::sync_batch_norm(input, call);
}

}  // namespace cohort
