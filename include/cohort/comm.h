// cohort::Comm: collectives over c10d Gloo (CPU tensors) and NCCL (CUDA tensors) that never hang
// silently. Every collective is fingerprinted (sequence number, op, dtype, shape) and checked on all
// ranks before data moves, has a timeout that names the ranks that never arrived, and fails promptly
// naming a rank that died. In a world of one every call is a no-op on its input.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <vector>

#include "cohort/error.h"

namespace cohort {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

/// Name of a ReduceOp as it appears in messages ("sum", "avg", ...).
const char* reduce_op_name(ReduceOp op);

namespace detail {
class CommImpl;
class PendingOp;
}  // namespace detail

/// Handle of an asynchronous collective. wait() blocks until it finished on this rank and throws
/// cohort::Error if it failed; the tensors passed in hold the result afterwards.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::PendingOp> op) : op_(std::move(op)) {}
  void wait();
  bool is_completed() const;

 private:
  std::shared_ptr<detail::PendingOp> op_;
};

/// The collectives of one group of ranks. Made by cohort::init(); thread-compatible (one caller at a
/// time), and every rank must call the same collectives in the same order.
class Comm {
 public:
  explicit Comm(std::unique_ptr<detail::CommImpl> impl);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;
  int size() const;
  std::chrono::milliseconds timeout() const;

  /// Reduces `tensor` in place across ranks and returns it.
  torch::Tensor allreduce(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum);
  Work allreduce_async(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum);

  /// Tensor fusion: packs many tensors (same dtype and device) into one flat buffer, reduces it with
  /// one collective and unpacks. Much faster than one call per tensor for many small tensors.
  void allreduce_fused(std::vector<torch::Tensor>& tensors, ReduceOp op = ReduceOp::kSum);
  Work allreduce_fused_async(std::vector<torch::Tensor> tensors, ReduceOp op = ReduceOp::kSum);

  /// Copies `root`'s tensor into every rank's `tensor` (same shape everywhere) and returns it.
  torch::Tensor broadcast(torch::Tensor tensor, int root = 0);
  Work broadcast_async(torch::Tensor tensor, int root = 0);

  /// Returns a tensor of shape [size, *tensor.shape] with every rank's tensor, in rank order.
  torch::Tensor allgather(const torch::Tensor& tensor);
  /// Gathers into `output` of shape [size * tensor.size(0), ...] (or numel size * tensor.numel()).
  Work allgather_async(torch::Tensor output, torch::Tensor tensor);

  /// Reduces `input` (its dim 0 divisible by size) and returns this rank's chunk of dim 0.
  torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op = ReduceOp::kSum);
  Work reduce_scatter_async(torch::Tensor output, torch::Tensor input, ReduceOp op = ReduceOp::kSum);

  void barrier();

  /// Point to point: `tensor` goes to rank `dst`; recv fills `tensor` from rank `src`.
  void send(const torch::Tensor& tensor, int dst);
  void recv(torch::Tensor tensor, int src);

  /// Number of collectives issued so far (the sequence number of the next one).
  int64_t sequence_number() const;

  detail::CommImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<detail::CommImpl> impl_;
};

}  // namespace cohort
