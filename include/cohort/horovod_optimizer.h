// cohort::hvd::DistributedOptimizer: Horovod's DistributedOptimizer. It wraps a LibTorch optimizer;
// as backward runs, each gradient's allreduce starts from its parameter's hook (gradients are fused
// into groups of up to HOROVOD_FUSION_THRESHOLD bytes), and step() waits for them before the inner
// optimizer steps. synchronize() / skip_synchronize() let a program clip the reduced gradients first.
// Included by cohort/horovod.h.
#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>

#include <memory>
#include <string>

#include "cohort/comm.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort::hvd {

/// How gradients travel: as they are, or as float16 (half the bytes; restored to their dtype after).
enum class Compression { none, fp16 };

struct DistributedOptimizerOptions {
  /// Backward passes accumulated locally before the gradients are reduced (gradient accumulation).
  TORCH_ARG(int, backward_passes_per_step) = 1;
  TORCH_ARG(Compression, compression) = Compression::none;
  /// Average (the default) or Sum over ranks.
  TORCH_ARG(ReduceOp, op) = ReduceOp::kAvg;
  /// Horovod's gradient_predivide_factor: gradients are divided by it before the sum and the sum by
  /// size() / factor after (Average only).
  TORCH_ARG(double, gradient_predivide_factor) = 1.0;
};

namespace detail {
class GradientReducer;
}

class DistributedOptimizer {
 public:
  using Options = DistributedOptimizerOptions;
  /// `named_parameters` (model->named_parameters()) names every parameter of `optimizer`; the names
  /// label the reductions and must be the same on every rank.
  DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                       const torch::OrderedDict<std::string, torch::Tensor>& named_parameters, Options options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(DistributedOptimizer&&) noexcept;
  DistributedOptimizer& operator=(DistributedOptimizer&&) noexcept;

  /// Waits for every gradient's reduction (starting those whose hooks did not run: zeros for a
  /// parameter without gradient), unless skip_synchronize() is active or synchronize() ran; then the
  /// inner optimizer's step.
  void step();
  /// Reduces and waits now, so the gradients can be changed (clipped) before step().
  void synchronize();
  /// The inner optimizer's zero_grad(); an error while reductions are in flight.
  void zero_grad();

  /// While it lives, step() does not synchronize (Horovod: `with optimizer.skip_synchronize():`).
  class SkipSynchronizeGuard {
   public:
    explicit SkipSynchronizeGuard(detail::GradientReducer* reducer);
    ~SkipSynchronizeGuard();
    SkipSynchronizeGuard(const SkipSynchronizeGuard&) = delete;
    SkipSynchronizeGuard& operator=(const SkipSynchronizeGuard&) = delete;
    SkipSynchronizeGuard(SkipSynchronizeGuard&& other) noexcept : reducer_(other.reducer_) { other.reducer_ = nullptr; }

   private:
    detail::GradientReducer* reducer_;
  };
  [[nodiscard]] SkipSynchronizeGuard skip_synchronize();

  torch::optim::Optimizer& optimizer();

 private:
  std::unique_ptr<detail::GradientReducer> reducer_;
};

}  // namespace cohort::hvd
COHORT_EXPORT_END
