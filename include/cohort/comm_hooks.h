// DDP communication hooks (PyTorch's register_comm_hook): what DistributedDataParallel does with each
// bucket of gradients instead of a plain averaging allreduce. Built in: fp16 / bf16 compression and
// PowerSGD low-rank compression (torch.distributed.algorithms.ddp_comm_hooks semantics). A hook starts
// its collectives when the bucket is ready, while backward runs; see docs/ddp.md, "Gradient compression".
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// One bucket of gradients as a hook sees it (PyTorch's GradBucket).
struct GradBucket {
  int64_t index = 0;                     ///< the bucket's place in launch order (0 first)
  bool is_last = false;                  ///< the last bucket of this backward
  torch::Tensor buffer;                  ///< this rank's gradients back to back; the hook leaves the average here
  std::vector<torch::Tensor> gradients;  ///< views into `buffer`, shaped as the parameters
  int64_t divisor = 1;  ///< what the sum is divided by for the average (world size; inside Join, its divisor)
};

/// The reduction a hook started: the collectives in flight and what runs once they finished (which
/// may start more collectives and so return a further HookFuture). DDP advances every bucket's future
/// on its own thread, in bucket order, the same way on every rank, so a hook's later collectives line
/// up across ranks. Continuations run only from advance() or wait(), never on another thread.
class HookFuture {
 public:
  using Then = std::function<HookFuture()>;
  /// A finished future (nothing in flight).
  HookFuture() = default;
  HookFuture(std::vector<Work> works, Then then);

  bool done() const { return works_.empty() && !then_; }
  /// Waits for the collectives in flight and runs the continuation: one stage forward.
  void advance();
  /// Advances until done.
  void wait();

 private:
  std::vector<Work> works_;
  Then then_;
};

/// A communication hook: a strategy for reducing one bucket. A hook object serves one DDP (it may
/// keep per-bucket state); register_comm_hook refuses one already registered elsewhere.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` over `comm`; when the returned future is done, bucket.buffer holds the
  /// average of every rank's gradients (or the hook's approximation of it).
  virtual HookFuture run(Comm& comm, const GradBucket& bucket) = 0;
  /// Its name in messages ("fp16_compress", "powersgd").
  virtual std::string name() const = 0;
  /// Called by register_comm_hook; throws when the hook was registered before.
  void claim();

 private:
  bool claimed_ = false;
};

/// PowerSGDState's settings, PyTorch's names and defaults (start_iteration is start_powerSGD_iter).
struct PowerSGDOptions {
  /// Rank of the low-rank approximation M ~ P Q^T (1 to 4 is typical).
  TORCH_ARG(int64_t, matrix_approximation_rank) = 1;
  /// Steps reduced with a plain allreduce before compression starts (PyTorch's default 1000).
  TORCH_ARG(int64_t, start_iteration) = 1000;
  /// A tensor is compressed only if (rows + cols) * rank * this < rows * cols (layer-wise hook).
  TORCH_ARG(double, min_compression_rate) = 2.0;
  /// Add each rank's compression error of the last step to its next gradient.
  TORCH_ARG(bool, use_error_feedback) = true;
  /// Start each step's power iteration from the last step's Q (else a fresh random Q every step).
  TORCH_ARG(bool, warm_start) = true;
  /// Added to each column norm when orthogonalizing (0: none; a zero column then becomes zeros).
  TORCH_ARG(double, orthogonalization_epsilon) = 0.0;
  /// Seed of the random initial Qs (0 to 2^32-1); the same draws as PyTorch's for the same seed.
  TORCH_ARG(int64_t, random_seed) = 0;
  /// Compress tensors of one shape in a bucket as one batch (layer-wise hook).
  TORCH_ARG(bool, batch_tensors_with_same_shape) = false;
};

namespace comm_hooks {

/// PyTorch's allreduce_hook: divide by the divisor, allreduce; the same result as no hook.
std::shared_ptr<CommHook> allreduce();
/// fp16_compress_hook: cast the bucket to float16, divide, allreduce in float16, cast back.
std::shared_ptr<CommHook> fp16_compress();
/// bf16_compress_hook: the same in bfloat16.
std::shared_ptr<CommHook> bf16_compress();
/// powerSGD_hook: per-tensor low-rank compression; 1-D tensors and tensors too small to gain are
/// allreduced uncompressed. Options are checked here (one line naming the option).
std::shared_ptr<CommHook> powersgd(const PowerSGDOptions& options = {});
/// batched_powerSGD_hook: the whole bucket as one square matrix (min_compression_rate and
/// batch_tensors_with_same_shape do not apply).
std::shared_ptr<CommHook> batched_powersgd(const PowerSGDOptions& options = {});

}  // namespace comm_hooks
}  // namespace cohort
COHORT_EXPORT_END
