// cohort::Comm: checks each public collective's arguments and issues its plan (comm/collective_plans.h):
// a blocking call runs on the caller's thread (no hand-off to the launcher thread), an async one is
// queued for the launcher thread so the caller never waits on the network.
#include "cohort/comm.h"

#include <ATen/ATen.h>

#include "comm/collective_plans.h"
#include "comm/comm_impl.h"
#include "comm/op_util.h"
#include "core/check.h"

namespace cohort {

using detail::make_op;
using detail::OpKind;
using detail::PendingOp;

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

void Work::wait() {
  if (op_) op_->comm_->wait(*op_);
}

bool Work::is_completed() const { return !op_ || op_->comm_->is_completed(*op_); }

namespace {

void check_reduce(const torch::Tensor& t, ReduceOp op, const char* name) {
  COHORT_CHECK_KIND(kInvalidArgument, t.defined(), name, ": the tensor is undefined");
  COHORT_CHECK_KIND(kInvalidArgument, op != ReduceOp::kAvg || at::isFloatingType(t.scalar_type()), name,
                    "(avg) is not defined for integer dtype ", detail::dtype_name(t.scalar_type()),
                    ": use sum and divide");
  COHORT_CHECK_KIND(kInvalidArgument, t.scalar_type() != torch::kBool, name,
                    " does not reduce bool tensors: convert to uint8");
}

void check_broadcast(const torch::Tensor& tensor, int root, int size) {
  COHORT_CHECK_KIND(kInvalidArgument, tensor.defined(), "broadcast: the tensor is undefined");
  COHORT_CHECK_KIND(kInvalidArgument, root >= 0 && root < size, "broadcast: root ", root,
                    " is not a rank of this world of ", size);
}

void check_allgather(const torch::Tensor& output, const torch::Tensor& tensor, int size) {
  COHORT_CHECK_KIND(kInvalidArgument, tensor.defined() && output.defined(), "allgather: a tensor is undefined");
  COHORT_CHECK_KIND(
      kInvalidArgument,
      output.numel() == tensor.numel() * size && output.scalar_type() == tensor.scalar_type() && output.is_contiguous(),
      "allgather: output must be contiguous with ", size, " x ", tensor.numel(), " elements of the input's dtype, got ",
      output.numel(), " elements");
}

void check_reduce_scatter(const torch::Tensor& output, const torch::Tensor& input, ReduceOp op, int n) {
  check_reduce(input, op, "reduce_scatter");
  COHORT_CHECK_KIND(kInvalidArgument, input.dim() >= 1 && input.size(0) % n == 0,
                    "reduce_scatter: dim 0 of the input (shape ", input.sizes(),
                    ") must be divisible by the world size ", n);
  COHORT_CHECK_KIND(kInvalidArgument, output.defined() && output.numel() * n == input.numel(),
                    "reduce_scatter: output must hold ", input.numel() / n, " elements, got ", output.numel());
}

Work issue(detail::CommImpl* impl, std::shared_ptr<PendingOp> pending, bool async) {
  return pending ? Work(impl->submit(std::move(pending), async)) : Work();
}

}  // namespace

Comm::Comm(std::unique_ptr<detail::CommImpl> impl) : impl_(std::move(impl)) {}
Comm::~Comm() = default;
int Comm::rank() const { return impl_->rank(); }
int Comm::size() const { return impl_->size(); }
std::chrono::milliseconds Comm::timeout() const { return impl_->timeout(); }
int64_t Comm::sequence_number() const { return impl_->sequence_number(); }

void Comm::abort(const std::string& reason) { impl_->abort(reason); }

Work Comm::allreduce_async(torch::Tensor tensor, ReduceOp op) {
  check_reduce(tensor, op, "allreduce");
  return issue(impl_.get(), detail::plan_allreduce(impl_.get(), tensor, op), true);
}

torch::Tensor Comm::allreduce(torch::Tensor tensor, ReduceOp op) {
  check_reduce(tensor, op, "allreduce");
  if (size() == 1) return tensor;
  issue(impl_.get(), detail::plan_allreduce(impl_.get(), tensor, op), false).wait();
  return tensor;
}

Work Comm::broadcast_async(torch::Tensor tensor, int root) {
  check_broadcast(tensor, root, size());
  return issue(impl_.get(), detail::plan_broadcast(impl_.get(), tensor, root), true);
}

torch::Tensor Comm::broadcast(torch::Tensor tensor, int root) {
  check_broadcast(tensor, root, size());
  issue(impl_.get(), detail::plan_broadcast(impl_.get(), tensor, root), false).wait();
  return tensor;
}

Work Comm::allgather_async(torch::Tensor output, torch::Tensor tensor) {
  check_allgather(output, tensor, size());
  return issue(impl_.get(), detail::plan_allgather(impl_.get(), output, tensor), true);
}

torch::Tensor Comm::allgather(const torch::Tensor& tensor) {
  std::vector<int64_t> shape{size()};
  for (auto d : tensor.sizes()) shape.push_back(d);
  torch::Tensor output = torch::empty(shape, tensor.options());
  check_allgather(output, tensor, size());
  issue(impl_.get(), detail::plan_allgather(impl_.get(), output, tensor), false).wait();
  return output;
}

Work Comm::reduce_scatter_async(torch::Tensor output, torch::Tensor input, ReduceOp op) {
  check_reduce_scatter(output, input, op, size());
  return issue(impl_.get(), detail::plan_reduce_scatter(impl_.get(), output, input, op), true);
}

torch::Tensor Comm::reduce_scatter(const torch::Tensor& input, ReduceOp op) {
  check_reduce(input, op, "reduce_scatter");
  COHORT_CHECK_KIND(kInvalidArgument, input.dim() >= 1, "reduce_scatter: the input needs at least one dimension");
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] /= size();
  torch::Tensor output = torch::empty(shape, input.options());
  check_reduce_scatter(output, input, op, size());
  issue(impl_.get(), detail::plan_reduce_scatter(impl_.get(), output, input, op), false).wait();
  return output;
}

void Comm::barrier() {
  if (size() == 1) return;
  // The agreement itself completes only once every rank arrived: no data needs to move.
  Work(impl_->submit(make_op(OpKind::kBarrier, torch::Tensor()), false)).wait();
}

}  // namespace cohort
