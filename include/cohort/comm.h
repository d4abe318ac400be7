// cohort::Comm: collectives that never hang silently, on CPU tensors (shared memory when every rank is
// on this host, cohort's TCP links between hosts, else c10d Gloo) and CUDA tensors (c10d NCCL). Every
// collective is fingerprinted (sequence number, op, dtype, shape) and checked on all ranks before
// data moves, has a timeout that names the ranks that never arrived, and fails promptly
// naming a rank that died. In a world of one every call is a no-op on its input.
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

/// Name of a ReduceOp as it appears in messages ("sum", "avg", ...).
const char* reduce_op_name(ReduceOp op);

/// The color that puts a rank in no group of Comm::split (MPI_UNDEFINED); any negative color does.
constexpr int kUndefinedColor = -1;

/// How a process group made by Comm::split or Comm::new_group is named and timed.
struct GroupOptions {
  /// Name used in error messages ("rank 3 (group rank 1 of 'data')"); empty: "group N" or "group N.color".
  TORCH_ARG(std::string, name) = "";
  /// Per-collective timeout of the group; 0 means the parent's.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::milliseconds(0);
};

/// Split sizes (first-dimension rows per rank) of Comm::alltoall_single; empty means even splits.
struct AlltoallSplits {
  TORCH_ARG(std::vector<int64_t>, input) = {};   ///< rows this rank sends to each rank
  TORCH_ARG(std::vector<int64_t>, output) = {};  ///< rows this rank receives from each rank
};

namespace detail {
class CommImpl;
class PendingOp;
struct CommAccess;  // src/comm/comm_access.h: cohort's own code reaching a Comm's internals
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
  /// The group's name ("" for the world).
  const std::string& name() const;
  /// The world rank of this group's rank `group_rank` (the identity for the world).
  int world_rank(int group_rank) const;

  /// MPI_Comm_split: every rank of this Comm calls it; ranks passing the same `color` form one new
  /// Comm, ordered by (key, rank here). A negative color (kUndefinedColor) joins none: returns null.
  /// The new Comm is a full one (own Gloo/NCCL groups, shared memory, fingerprints, timeouts).
  std::shared_ptr<Comm> split(int color, int key = 0, const GroupOptions& options = {});
  /// torch.distributed.new_group(ranks): every rank of this Comm calls it with the same `ranks`
  /// (ranks of this Comm, any order; the group orders them ascending). Non-members get null.
  std::shared_ptr<Comm> new_group(const std::vector<int>& ranks, const GroupOptions& options = {});

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

  /// Horovod's allgather: every rank's tensor (first dimensions may differ, the rest must match)
  /// concatenated along dim 0 in rank order.
  torch::Tensor allgather_v(const torch::Tensor& tensor);

  /// torch.distributed.all_to_all_single: row block j of `input` (dim 0) goes to rank j, and block j of
  /// `output` comes from rank j. Even splits when `splits` is empty, else input/output rows per rank.
  void alltoall_single(torch::Tensor output, const torch::Tensor& input, const AlltoallSplits& splits = {});
  Work alltoall_single_async(torch::Tensor output, torch::Tensor input, const AlltoallSplits& splits = {});
  /// Sends `input_splits[j]` rows of `input` to rank j (even when empty) and returns what every rank
  /// sent here, in rank order: the receive sizes are exchanged first.
  torch::Tensor alltoall(const torch::Tensor& input, const std::vector<int64_t>& input_splits = {});

  void barrier();

  /// Point to point: `tensor` goes to rank `dst`; recv fills `tensor` (its shape and dtype must be the
  /// sender's) from rank `src`. Between two ranks, messages of one tag arrive in the order sent; tags
  /// are independent channels. Checked like collectives: a mismatch, a dead peer, the timeout.
  void send(const torch::Tensor& tensor, int dst, int tag = 0);
  void recv(torch::Tensor tensor, int src, int tag = 0);
  Work isend(torch::Tensor tensor, int dst, int tag = 0);
  Work irecv(torch::Tensor tensor, int src, int tag = 0);
  /// Small metadata (shapes, names) whose size the receiver does not know: a vector of int64 or a string.
  void send_object(const std::vector<int64_t>& values, int dst, int tag = 0);
  void send_object(const std::string& text, int dst, int tag = 0);
  /// recv_object<std::vector<int64_t>>(src) or recv_object<std::string>(src): the matching send_object.
  template <typename T>
  T recv_object(int src, int tag = 0);

  /// Fails this Comm on purpose, when work between its calls failed (a pipeline stage that raised):
  /// every later call here raises `reason`, and every peer's pending and later calls raise naming this
  /// rank and `reason`, so no rank waits for this one. The first failure of a Comm is the one kept.
  void abort(const std::string& reason);

  /// Number of collectives issued so far (the sequence number of the next one).
  int64_t sequence_number() const;

 private:
  friend struct detail::CommAccess;
  std::unique_ptr<detail::CommImpl> impl_;
};

}  // namespace cohort
COHORT_EXPORT_END
