// cohort::SyncBatchNorm: torch.nn.SyncBatchNorm for C++. In training, the batch statistics are those of
// the whole batch over the ranks of a Comm (each rank's count, mean and invstd all-gathered; ranks may
// have different batch sizes, even none), and backward all-reduces the two per-channel sums the input
// gradient needs; eval mode uses the running statistics without communicating. See docs/ddp.md.
//
//   cohort::convert_sync_batchnorm(*model);   // every BatchNorm1d/2d/3d in the tree, before wrapping
#pragma once

#include <c10/util/Optional.h>
#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

struct SyncBatchNormOptions {
  /* implicit */ SyncBatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  /// C, the channels (dimension 1 of the input).
  TORCH_ARG(int64_t, num_features);
  /// Added to the variance before its square root.
  TORCH_ARG(double, eps) = 1e-5;
  /// Weight of the batch in the running statistics; null: their cumulative average (PyTorch's None).
  TORCH_ARG(c10::optional<double>, momentum) = 0.1;
  /// Learnable per-channel weight and bias.
  TORCH_ARG(bool, affine) = true;
  /// Keep running_mean / running_var (eval mode uses them); false: batch statistics in eval too.
  TORCH_ARG(bool, track_running_stats) = true;
  /// The ranks whose batches form the statistics; null means the world's (cohort::init()), resolved
  /// at each training forward. A world of one computes plain BatchNorm.
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
};

namespace detail {
/// Existing parameters and buffers a SyncBatchNorm takes over (convert_sync_batchnorm's path).
struct SyncBatchNormState {
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};
}  // namespace detail

/// Any input of rank >= 2, [N, C, ...] (BatchNorm1d, 2d and 3d in one module, as in PyTorch).
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(SyncBatchNormOptions options);
  SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(SyncBatchNormOptions(num_features)) {}
  /// Registers `state`'s tensors themselves (shared, not copied) as its parameters and buffers.
  SyncBatchNormImpl(SyncBatchNormOptions options, detail::SyncBatchNormState state);

  torch::Tensor forward(const torch::Tensor& input);

  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  SyncBatchNormOptions options;
  torch::Tensor weight, bias;                                    // undefined unless affine
  torch::Tensor running_mean, running_var, num_batches_tracked;  // undefined unless tracked

 private:
  detail::SyncBatchNormState adopt_;
};
TORCH_MODULE(SyncBatchNorm);

struct ConvertSyncBatchNormOptions {
  /// The Comm of every SyncBatchNorm made (PyTorch's process_group); null: the world's.
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
};

/// PyTorch's SyncBatchNorm.convert_sync_batchnorm: replaces every BatchNorm1d/2d/3d below `module` by a
/// SyncBatchNorm with the same options that shares its parameters and buffers (optimizers made before
/// keep working; state dict names are unchanged). Returns the converted modules' names.
/// C++ cannot re-point a typed member holder (`torch::nn::BatchNorm2d bn` in a user's module), so a
/// BatchNorm its parent reaches through such a member cannot be converted: the function checks every
/// BatchNorm first and throws, changing nothing, when one is referenced from outside the module tree.
/// Sequential, ModuleList, ModuleDict and register_module-only children convert.
std::vector<std::string> convert_sync_batchnorm(torch::nn::Module& module, ConvertSyncBatchNormOptions options = {});

}  // namespace cohort
COHORT_EXPORT_END
