// cohort::DistributedDataParallel: wraps any torch::nn::Module so that backward averages gradients
// across ranks, bucket by bucket, while backward is still running (communication overlaps compute).
// Calling it looks like calling the module: ddp->forward(x). See docs/ddp.md.
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/comm_hooks.h"
#include "cohort/export.h"
#include "cohort/join.h"

COHORT_EXPORT_BEGIN
namespace cohort {

struct DDPOptions {
  /// Bucket size after the first bucket, in MiB (PyTorch's bucket_cap_mb).
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  /// The first bucket (the last layers' gradients, ready first) is small so it starts early.
  TORCH_ARG(double, first_bucket_cap_mb) = 1.0;
  /// Allow parameters that get no gradient in a backward pass (their gradient counts as zero).
  TORCH_ARG(bool, find_unused_parameters) = false;
  /// Copy rank 0's buffers (BatchNorm statistics) to every rank after each backward.
  TORCH_ARG(bool, broadcast_buffers) = true;
  /// The Comm to reduce over; null means the world's (cohort::init()).
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
};

namespace detail {
class Reducer;
}

/// The non-template part of DDP: parameters, buckets and hooks. Use DistributedDataParallel<M>.
/// A Joinable: inside cohort::Join a rank out of inputs shadows its bucket allreduces and buffer
/// broadcast, and at the end takes the parameters and buffers of the last rank to join.
class DataParallelCore : public Joinable {
 public:
  DataParallelCore(std::shared_ptr<torch::nn::Module> module, DDPOptions options);
  ~DataParallelCore() override;
  DataParallelCore(DataParallelCore&&) noexcept;
  DataParallelCore& operator=(DataParallelCore&&) noexcept;

  /// While the guard lives, backward only accumulates gradients locally (gradient accumulation);
  /// the first backward after it reduces the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(detail::Reducer* reducer);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard(NoSyncGuard&& other) noexcept : reducer_(other.reducer_) { other.reducer_ = nullptr; }

   private:
    detail::Reducer* reducer_;
  };
  [[nodiscard]] NoSyncGuard no_sync();

  /// PyTorch's register_comm_hook: every later bucket is reduced by `hook` instead of the averaging
  /// allreduce (cohort::comm_hooks::fp16_compress(), bf16_compress(), powersgd(...)). Once per DDP, before
  /// the first synchronized backward. In a world of one nothing is reduced and the hook never runs.
  void register_comm_hook(std::shared_ptr<CommHook> hook);

  /// The buckets' parameter names, in launch order (for inspection and tests).
  std::vector<std::vector<std::string>> bucket_layout() const;
  /// Seconds spent waiting for buckets after backward finished, last step (the non-hidden part).
  double last_wait_seconds() const;

  // Joinable (cohort/join.h)
  void join_shadow_step(const JoinStep& step) override;
  void join_finish(int source) override;
  Comm* join_comm() override;
  torch::Device join_device() const override;

 protected:
  void attach_join(Join* join) override;

  std::unique_ptr<detail::Reducer> reducer_;
};

/// DistributedDataParallel<M> for a module type M (deduced: `cohort::DistributedDataParallel ddp(net);`).
template <typename M>
class DistributedDataParallel : public DataParallelCore {
 public:
  explicit DistributedDataParallel(std::shared_ptr<M> module, DDPOptions options = {})
      : DataParallelCore(module, std::move(options)), module_(std::move(module)) {}
  template <typename Holder, typename = typename Holder::ContainedType>
  explicit DistributedDataParallel(const Holder& holder, DDPOptions options = {})
      : DistributedDataParallel(holder.ptr(), std::move(options)) {}

  /// The wrapped module: ddp->forward(x), ddp->parameters(), ddp->train() ...
  M* operator->() const { return module_.get(); }
  M& operator*() const { return *module_; }
  const std::shared_ptr<M>& module() const { return module_; }

  template <typename... Args>
  auto forward(Args&&... args) {
    return module_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return module_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> module_;
};

template <typename M>
DistributedDataParallel(std::shared_ptr<M>) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(std::shared_ptr<M>, DDPOptions) -> DistributedDataParallel<M>;
template <typename Impl>
DistributedDataParallel(torch::nn::ModuleHolder<Impl>) -> DistributedDataParallel<Impl>;
template <typename Impl>
DistributedDataParallel(torch::nn::ModuleHolder<Impl>, DDPOptions) -> DistributedDataParallel<Impl>;

/// Sums each tensor over ranks (e.g. correct predictions and sample counts) so every rank holds the
/// exact global metric; a world of one returns the inputs. Integer tensors stay exact.
std::vector<torch::Tensor> reduce_metrics(std::vector<torch::Tensor> values, Comm* comm = nullptr);

}  // namespace cohort
COHORT_EXPORT_END
