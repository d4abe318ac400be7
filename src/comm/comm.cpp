// cohort::Comm: turns each public collective into a PendingOp (fingerprint, launch on c10d, finish)
// and adapts tensors to what the transport takes: non-contiguous tensors go through a contiguous copy,
// bfloat16 is reduced in float32 on Gloo (which has no bfloat16 kernels), avg is sum then divide.
// When every rank is on this host, CPU tensors go through the shared-memory transport instead of Gloo.
#include "cohort/comm.h"

#include <ATen/ATen.h>

#include "comm/comm_impl.h"
#include "comm/op_util.h"

namespace cohort {

using detail::Fingerprint;
using detail::OpKind;
using detail::PendingOp;
using detail::make_op;
using detail::transport_view;

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
  COHORT_CHECK(t.defined(), name, ": the tensor is undefined");
  COHORT_CHECK(op != ReduceOp::kAvg || at::isFloatingType(t.scalar_type()), name,
               "(avg) is not defined for integer dtype ", detail::dtype_name(t.scalar_type()),
               ": use sum and divide");
  COHORT_CHECK(t.scalar_type() != torch::kBool, name, " does not reduce bool tensors: convert to uint8");
}

// The tensor the transport works on: `t` itself when it can, else a contiguous (and for reductions on
// CPU, bfloat16 -> float32) copy that finish() writes back.
torch::Tensor working_copy(const torch::Tensor& t, bool reduction) {
  torch::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  if (reduction && buf.is_cpu() && buf.scalar_type() == torch::kBFloat16) buf = buf.to(torch::kFloat);
  return buf;
}

struct ReduceScatterArgs {
  torch::Tensor output, input;  // input: contiguous, size x output.numel() elements
  ReduceOp op;
  int size;
};

// NCCL reduces and scatters natively: the output is the only receive buffer (ZeRO's memory saving
// holds on the GPU), with a working copy only for an output of another layout or dtype.
void plan_native_reduce_scatter(detail::CommImpl* impl, PendingOp& pending, const ReduceScatterArgs& args) {
  const bool direct = args.output.is_contiguous() && args.output.scalar_type() == args.input.scalar_type();
  torch::Tensor out = direct ? args.output.view(-1) : torch::empty({args.input.numel() / args.size},
                                                                   args.input.options());
  if (args.input.numel() > 0) {
    pending.launch = [impl, out, input = args.input, op = args.op] {
      return detail::reduce_scatter_flat(impl->backend_for(input.device()), out, input.view(-1), op);
    };
  }
  pending.finish = [output = args.output, out, op = args.op, n = args.size, direct]() mutable {
    if (op == ReduceOp::kAvg) out.div_(n);
    if (!direct) output.copy_(out.view(output.sizes()));
  };
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
  auto pending = make_op(OpKind::kAllreduce, tensor, op);
  torch::Tensor buf = working_copy(tensor, true);
  auto* impl = impl_.get();
  if (buf.numel() > 0 && impl->shm() && detail::ShmTransport::can_reduce(buf)) {
    pending->shm = [buf, op](detail::ShmTransport& shm, const detail::ShmTransport::Watch& watch) {
      shm.allreduce(buf, op, watch);
    };
  } else if (buf.numel() > 0) {
    pending->launch = [impl, buf, op] {
      std::vector<at::Tensor> tensors{buf};
      c10d::AllreduceOptions options;
      options.reduceOp = detail::to_c10d(op);
      return impl->backend_for(buf.device()).allreduce(tensors, options);
    };
  }
  const int size = impl_->size();
  pending->finish = [tensor, buf, op, size]() mutable {
    if (op == ReduceOp::kAvg && size > 1) buf.div_(size);
    if (!buf.is_same(tensor)) tensor.copy_(buf);
  };
  return Work(impl_->submit(pending, true));
}

torch::Tensor Comm::allreduce(torch::Tensor tensor, ReduceOp op) {
  check_reduce(tensor, op, "allreduce");
  if (size() == 1) return tensor;
  auto pending = allreduce_async(tensor, op);
  pending.wait();
  return tensor;
}

Work Comm::broadcast_async(torch::Tensor tensor, int root) {
  COHORT_CHECK(tensor.defined(), "broadcast: the tensor is undefined");
  COHORT_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of this world of ",
               size());
  auto pending = make_op(OpKind::kBroadcast, tensor, ReduceOp::kSum, root);
  torch::Tensor buf = working_copy(tensor, false);
  auto* impl = impl_.get();
  if (buf.numel() > 0 && impl->shm() && detail::ShmTransport::can_move(buf)) {
    pending->shm = [buf, root](detail::ShmTransport& shm, const detail::ShmTransport::Watch& watch) {
      shm.broadcast(buf, root, watch);
    };
  } else if (buf.numel() > 0) {
    pending->launch = [impl, buf, root] {
      std::vector<at::Tensor> tensors{transport_view(buf)};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      return impl->backend_for(buf.device()).broadcast(tensors, options);
    };
  }
  pending->finish = [tensor, buf]() mutable {
    if (!buf.is_same(tensor)) tensor.copy_(buf);
  };
  return Work(impl_->submit(pending, true));
}

torch::Tensor Comm::broadcast(torch::Tensor tensor, int root) {
  broadcast_async(tensor, root).wait();
  return tensor;
}

Work Comm::allgather_async(torch::Tensor output, torch::Tensor tensor) {
  COHORT_CHECK(tensor.defined() && output.defined(), "allgather: a tensor is undefined");
  COHORT_CHECK(output.numel() == tensor.numel() * size() && output.scalar_type() == tensor.scalar_type() &&
                   output.is_contiguous(),
               "allgather: output must be contiguous with ", size(), " x ", tensor.numel(),
               " elements of the input's dtype, got ", output.numel(), " elements");
  auto pending = make_op(OpKind::kAllgather, tensor);
  torch::Tensor input = working_copy(tensor, false);
  if (size() == 1) {
    output.view_as(input).copy_(input);
    return Work();
  }
  auto* impl = impl_.get();
  const int n = size();
  if (input.numel() > 0 && impl->shm() && detail::ShmTransport::can_move(input) && output.is_cpu()) {
    pending->shm = [input, output](detail::ShmTransport& shm, const detail::ShmTransport::Watch& watch) {
      shm.allgather(output, input, watch);
    };
  } else if (input.numel() > 0 && input.is_cuda() && impl->has_nccl()) {
    pending->launch = [impl, input, output] {  // NCCL gathers straight into the flat output
      return detail::allgather_flat(impl->backend_for(input.device()), output.view(-1), input.view(-1));
    };
  } else if (input.numel() > 0) {
    pending->launch = [impl, input, output, n] {
      std::vector<int64_t> shape{n};
      for (auto d : input.sizes()) shape.push_back(d);
      std::vector<std::vector<at::Tensor>> outputs(1, transport_view(output).view(shape).unbind(0));
      std::vector<at::Tensor> inputs{transport_view(input)};
      return impl->backend_for(input.device()).allgather(outputs, inputs);
    };
  }
  return Work(impl_->submit(pending, true));
}

torch::Tensor Comm::allgather(const torch::Tensor& tensor) {
  std::vector<int64_t> shape{size()};
  for (auto d : tensor.sizes()) shape.push_back(d);
  torch::Tensor output = torch::empty(shape, tensor.options());
  allgather_async(output, tensor).wait();
  return output;
}

Work Comm::reduce_scatter_async(torch::Tensor output, torch::Tensor input, ReduceOp op) {
  check_reduce(input, op, "reduce_scatter");
  const int n = size();
  COHORT_CHECK(input.dim() >= 1 && input.size(0) % n == 0, "reduce_scatter: dim 0 of the input (shape ",
               input.sizes(), ") must be divisible by the world size ", n);
  COHORT_CHECK(output.defined() && output.numel() * n == input.numel(), "reduce_scatter: output must hold ",
               input.numel() / n, " elements, got ", output.numel());
  auto pending = make_op(OpKind::kReduceScatter, input, op);
  torch::Tensor buf = input.contiguous();
  auto* impl = impl_.get();
  // The choice of path may depend only on what every rank agreed on (dtype, shape), never on this
  // rank's output layout: an output of another layout or dtype gets a working copy.
  if (n > 1 && buf.numel() > 0 && impl->shm() && detail::ShmTransport::can_reduce(buf)) {
    const bool direct = output.is_contiguous() && output.scalar_type() == buf.scalar_type();
    torch::Tensor out = direct ? output.view(-1) : torch::empty({buf.numel() / n}, buf.options());
    pending->shm = [out, buf, op](detail::ShmTransport& shm, const detail::ShmTransport::Watch& watch) {
      shm.reduce_scatter(out, buf, op, watch);
    };
    pending->finish = [output, out, op, n, direct]() mutable {
      if (op == ReduceOp::kAvg) out.div_(n);
      if (!direct) output.copy_(out.view(output.sizes()));
    };
    return Work(impl_->submit(pending, true));
  }
  if (n > 1 && buf.is_cuda() && impl->has_nccl()) {
    plan_native_reduce_scatter(impl, *pending, {output, buf, op, n});
    return Work(impl_->submit(pending, true));
  }
  // Gloo in LibTorch 1.13 has no reduce_scatter: an all-to-all moves chunk j to rank j (the same
  // bytes a ring reduce-scatter moves) and each rank reduces its n chunks locally.
  auto received = std::make_shared<torch::Tensor>(torch::empty_like(buf));
  if (n == 1) {
    *received = buf;
  } else if (buf.numel() > 0) {
    pending->launch = [impl, buf, received] {
      std::vector<int64_t> no_splits;
      auto out = transport_view(*received);
      auto in = transport_view(buf);
      c10d::AllToAllOptions options;
      return impl->backend_for(buf.device()).alltoall_base(out, in, no_splits, no_splits, options);
    };
  }
  pending->finish = [output, received, op, n]() mutable {
    std::vector<int64_t> shape{n, -1};
    torch::Tensor chunks = received->view(shape);
    const bool upcast = chunks.scalar_type() == torch::kBFloat16 || chunks.scalar_type() == torch::kHalf;
    if (!upcast && (op == ReduceOp::kSum || op == ReduceOp::kAvg) && output.is_contiguous()) {
      // Straight into the output: no temporary and no second copy (the ZeRO engine's hot path).
      torch::Tensor out = output.view(-1);
      at::sum_out(out, chunks, std::vector<int64_t>{0});
      if (op == ReduceOp::kAvg) out.div_(n);
      return;
    }
    if (upcast) chunks = chunks.to(torch::kFloat);
    torch::Tensor reduced;
    switch (op) {
      case ReduceOp::kSum: reduced = chunks.sum(0); break;
      case ReduceOp::kAvg: reduced = chunks.sum(0).div_(n); break;
      case ReduceOp::kMin: reduced = std::get<0>(chunks.min(0)); break;
      case ReduceOp::kMax: reduced = std::get<0>(chunks.max(0)); break;
      case ReduceOp::kProduct: reduced = chunks.prod(0); break;
    }
    output.view(-1).copy_(reduced);
  };
  if (n == 1) {
    pending->finish();
    return Work();
  }
  return Work(impl_->submit(pending, true));
}

torch::Tensor Comm::reduce_scatter(const torch::Tensor& input, ReduceOp op) {
  check_reduce(input, op, "reduce_scatter");
  COHORT_CHECK(input.dim() >= 1, "reduce_scatter: the input needs at least one dimension");
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] /= size();
  torch::Tensor output = torch::empty(shape, input.options());
  reduce_scatter_async(output, input, op).wait();
  return output;
}

void Comm::barrier() {
  if (size() == 1) return;
  // The agreement itself completes only once every rank arrived: no data needs to move.
  Work(impl_->submit(make_op(OpKind::kBarrier, torch::Tensor()), false)).wait();
}

}  // namespace cohort
