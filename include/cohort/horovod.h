// cohort::hvd: Horovod's PyTorch API in C++ (hvd.init(), hvd.allreduce(), hvd.DistributedOptimizer ...)
// on cohort's collectives, so a program written for Horovod moves over call for call. As in Horovod,
// operations are matched across ranks by name, so ranks may submit them in any order; unnamed ones are
// matched by their order among the unnamed ones (docs/horovod.md, "How operations are matched").
// A lone process is a world of one: every operation returns its input's values.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"
#include "cohort/world.h"

COHORT_EXPORT_BEGIN
namespace cohort::hvd {

/// Horovod's reduction operations: hvd::Average (the default), hvd::Sum, hvd::Min, hvd::Max, hvd::Product.
inline constexpr ReduceOp Average = ReduceOp::kAvg;
inline constexpr ReduceOp Sum = ReduceOp::kSum;
inline constexpr ReduceOp Min = ReduceOp::kMin;
inline constexpr ReduceOp Max = ReduceOp::kMax;
inline constexpr ReduceOp Product = ReduceOp::kProduct;

/// What an *_async call returns: pass it to poll() or synchronize(), in any order.
using Handle = int64_t;

/// hvd.init(): cohort::init() (mpirun, srun, torchrun, cohortrun or a lone process) plus Horovod's
/// settings from the environment (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, HOROVOD_CACHE_CAPACITY,
/// HOROVOD_STALL_CHECK_TIME_SECONDS, HOROVOD_STALL_CHECK_DISABLE) and COHORT_HVD_ORDERED; any other
/// HOROVOD_* variable that is set gets one warning naming it. Calling it again is a no-op.
void init(const InitOptions& options = {});
/// True between init() and shutdown().
bool is_initialized();
/// Waits for nothing: operations still in flight are dropped; then cohort::shutdown().
void shutdown();

int size();
int rank();
/// Ranks on this node, and this rank's place among them.
int local_size();
int local_rank();
/// Ranks with this rank's local rank (one per node), and this rank's place among them.
int cross_size();
int cross_rank();

/// Horovod's process set: ranks that run operations among themselves, concurrently with other sets.
/// ProcessSet() is the global set (every rank); hvd::add_process_set makes the others.
class ProcessSet {
 public:
  ProcessSet() = default;
  /// 0 for the global set, then 1, 2, ... in the order add_process_set made them.
  int id() const { return id_; }
  /// World ranks in the set, ascending.
  std::vector<int> ranks() const;
  /// Whether this rank is in the set; its place among the set's ranks (-1 when it is not); the set's size.
  bool included() const;
  int rank() const;
  int size() const;

 private:
  friend ProcessSet add_process_set(const std::vector<int>& ranks);
  explicit ProcessSet(int id) : id_(id) {}
  int id_ = 0;
};

/// hvd.global_process_set.
inline const ProcessSet global_process_set{};

/// hvd.add_process_set (Horovod's dynamic process sets): every rank calls it, in the same order, with the
/// same world ranks (any order, no repeats). Operations given the set run on its ranks only, each set's
/// operations matched by name among its own ranks.
ProcessSet add_process_set(const std::vector<int>& ranks);

/// hvd.allreduce's keyword arguments.
struct AllreduceOptions {
  /// The tensor's name (the same on every rank); empty: "allreduce.noname.<n>" for the n-th unnamed
  /// operation, matched by that order.
  TORCH_ARG(std::string, name) = "";
  TORCH_ARG(ReduceOp, op) = Average;
  /// Multiplies the input before the reduction and the result after it.
  TORCH_ARG(double, prescale_factor) = 1.0;
  TORCH_ARG(double, postscale_factor) = 1.0;
  /// The ranks that reduce together (every rank of the set calls it; others may not).
  TORCH_ARG(ProcessSet, process_set) = ProcessSet();
};

/// A new tensor holding op over every rank's `tensor` (Average: the sum divided by size()).
torch::Tensor allreduce(const torch::Tensor& tensor, const std::string& name = "", ReduceOp op = Average);
torch::Tensor allreduce(const torch::Tensor& tensor, const AllreduceOptions& options);
/// In place (hvd.allreduce_): `tensor` holds the result and is returned.
torch::Tensor allreduce_(torch::Tensor tensor, const AllreduceOptions& options = {});
Handle allreduce_async(const torch::Tensor& tensor, const std::string& name = "", ReduceOp op = Average);
Handle allreduce_async(const torch::Tensor& tensor, const AllreduceOptions& options);
Handle allreduce_async_(torch::Tensor tensor, const AllreduceOptions& options = {});

/// Reduces several tensors (one dtype and device) as one fused collective; options.name names the group.
std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const AllreduceOptions& options = {});
Handle grouped_allreduce_async(const std::vector<torch::Tensor>& tensors, const AllreduceOptions& options = {});

/// Every rank's `tensor` concatenated along dim 0 in rank order; first dimensions may differ.
torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name = "",
                        const ProcessSet& process_set = ProcessSet());
/// Returns at once; the row counts, then the rows, move once every rank submitted the name (with
/// COHORT_HVD_ORDERED=1 the counts are exchanged in the call).
Handle allgather_async(const torch::Tensor& tensor, const std::string& name = "",
                       const ProcessSet& process_set = ProcessSet());

/// A new tensor holding `root_rank`'s `tensor` (root_rank: a world rank, in `process_set`).
torch::Tensor broadcast(const torch::Tensor& tensor, int root_rank, const std::string& name = "",
                        const ProcessSet& process_set = ProcessSet());
torch::Tensor broadcast_(torch::Tensor tensor, int root_rank, const std::string& name = "",
                         const ProcessSet& process_set = ProcessSet());
Handle broadcast_async(const torch::Tensor& tensor, int root_rank, const std::string& name = "",
                       const ProcessSet& process_set = ProcessSet());
Handle broadcast_async_(torch::Tensor tensor, int root_rank, const std::string& name = "",
                        const ProcessSet& process_set = ProcessSet());

/// Sends splits[j] rows of `tensor` to rank j (even splits when empty) and returns the rows every
/// rank sent here, in rank order (j: the place in `process_set`).
torch::Tensor alltoall(const torch::Tensor& tensor, const std::vector<int64_t>& splits = {},
                       const std::string& name = "", const ProcessSet& process_set = ProcessSet());

/// True once the operation finished (synchronize() then returns without waiting).
bool poll(Handle handle);
/// Waits for the operation and returns its result; the handle is then spent.
torch::Tensor synchronize(Handle handle);
/// synchronize() of a grouped_allreduce_async: one result per tensor.
std::vector<torch::Tensor> synchronize_group(Handle handle);

void barrier();

/// hvd.join(): this rank has run out of data. Until every rank has called it, this rank takes part in
/// the allreduces the other ranks still submit (DistributedOptimizer's included) with zeros, so they
/// do not wait for it; an Average still divides by size(), as in Horovod. Other operations (Min, Max,
/// Product, allgather, broadcast, alltoall) fail on the ranks that submit them while a rank has joined.
/// Returns, on every rank, the rank that joined last (the highest of those that joined together); the
/// ranks may then go on and join again. Global set only; needs negotiation (not COHORT_HVD_ORDERED=1).
int join();

/// hvd.broadcast_object: `root_rank`'s `value` on every rank of `process_set`. Any value torch::pickle_save
/// takes: numbers, strings, tensors, and lists, tuples and dicts of them. Named "<name>.size" and
/// "<name>.bytes" (unnamed operations when `name` is empty).
c10::IValue broadcast_object(const c10::IValue& value, int root_rank = 0, const std::string& name = "",
                             const ProcessSet& process_set = ProcessSet());
/// hvd.allgather_object: every rank's `value`, in rank order (sizes may differ).
std::vector<c10::IValue> allgather_object(const c10::IValue& value, const std::string& name = "",
                                          const ProcessSet& process_set = ProcessSet());

/// Copies `root_rank`'s values of the named tensors (model->named_parameters(), named_buffers())
/// into every rank's, in place. Names must be the same on every rank.
void broadcast_parameters(const torch::OrderedDict<std::string, torch::Tensor>& named_tensors, int root_rank);
/// Makes every rank's optimizer state (Adam's moments and step counts, SGD's momentum, ..., and each
/// group's learning rate) `root_rank`'s, creating or dropping per-parameter states as the root has them.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank);

}  // namespace cohort::hvd
COHORT_EXPORT_END

#include "cohort/horovod_elastic.h"
#include "cohort/horovod_optimizer.h"
