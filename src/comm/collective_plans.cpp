// The PendingOp of each collective (see collective_plans.h). Non-contiguous tensors go through a
// contiguous copy, bfloat16 is reduced in float32 off the GPU (Gloo has no bfloat16 kernels), avg is a
// sum then a division.
#include "comm/collective_plans.h"

#include <ATen/ATen.h>

#include "comm/op_util.h"

namespace cohort::detail {
namespace {

using Watch = ShmTransport::Watch;

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
void plan_native_reduce_scatter(CommImpl* impl, PendingOp& pending, const ReduceScatterArgs& args) {
  const bool direct = args.output.is_contiguous() && args.output.scalar_type() == args.input.scalar_type();
  torch::Tensor out = direct ? args.output.view(-1) : torch::empty({args.input.numel() / args.size},
                                                                   args.input.options());
  if (args.input.numel() > 0) {
    pending.launch = [impl, out, input = args.input, op = args.op] {
      return reduce_scatter_flat(impl->backend_for(input.device()), out, input.view(-1), to_c10d(op));
    };
  }
  pending.finish = [output = args.output, out, op = args.op, n = args.size, direct]() mutable {
    if (op == ReduceOp::kAvg) out.div_(n);
    if (!direct) output.copy_(out.view(output.sizes()));
  };
}

// Gloo in LibTorch 1.13 has no reduce_scatter: an all-to-all moves chunk j to rank j (the same bytes a
// ring reduce-scatter moves) and each rank reduces its n chunks locally.
void plan_reduce_scatter_by_alltoall(CommImpl* impl, PendingOp& pending, const ReduceScatterArgs& args) {
  const torch::Tensor& buf = args.input;
  auto received = std::make_shared<torch::Tensor>(torch::empty_like(buf));
  if (buf.numel() > 0) {
    pending.launch = [impl, buf, received] {
      std::vector<int64_t> no_splits;
      auto out = transport_view(*received);
      auto in = transport_view(buf);
      c10d::AllToAllOptions options;
      return impl->backend_for(buf.device()).alltoall_base(out, in, no_splits, no_splits, options);
    };
  }
  pending.finish = [output = args.output, received, op = args.op, n = args.size]() mutable {
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
}

}  // namespace

std::shared_ptr<PendingOp> plan_allreduce(CommImpl* impl, torch::Tensor tensor, ReduceOp op) {
  auto pending = make_op(OpKind::kAllreduce, tensor, op);
  torch::Tensor buf = working_copy(tensor, true);
  if (buf.numel() > 0 && impl->shm() && ShmTransport::can_reduce(buf)) {
    pending->shm = [buf, op](ShmTransport& shm, uint64_t fingerprint, const Watch& watch) {
      return shm.allreduce(buf, op, fingerprint, watch);
    };
  } else if (buf.numel() > 0) {
    pending->launch = [impl, buf, op] {
      std::vector<at::Tensor> tensors{buf};
      c10d::AllreduceOptions options;
      options.reduceOp = to_c10d(op);
      return impl->backend_for(buf.device()).allreduce(tensors, options);
    };
  }
  const int size = impl->size();
  pending->finish = [tensor, buf, op, size]() mutable {
    if (op == ReduceOp::kAvg && size > 1) buf.div_(size);
    if (!buf.is_same(tensor)) tensor.copy_(buf);
  };
  return pending;
}

std::shared_ptr<PendingOp> plan_broadcast(CommImpl* impl, torch::Tensor tensor, int root) {
  auto pending = make_op(OpKind::kBroadcast, tensor, ReduceOp::kSum, root);
  torch::Tensor buf = working_copy(tensor, false);
  if (buf.numel() > 0 && impl->shm() && ShmTransport::can_move(buf)) {
    pending->shm = [buf, root](ShmTransport& shm, uint64_t fingerprint, const Watch& watch) {
      return shm.broadcast(buf, root, fingerprint, watch);
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
  return pending;
}

std::shared_ptr<PendingOp> plan_allgather(CommImpl* impl, torch::Tensor output, torch::Tensor tensor) {
  auto pending = make_op(OpKind::kAllgather, tensor);
  torch::Tensor input = working_copy(tensor, false);
  if (impl->size() == 1) {
    output.view_as(input).copy_(input);
    return nullptr;
  }
  const int n = impl->size();
  if (input.numel() > 0 && impl->shm() && ShmTransport::can_move(input) && output.is_cpu()) {
    pending->shm = [input, output](ShmTransport& shm, uint64_t fingerprint, const Watch& watch) {
      return shm.allgather(output, input, fingerprint, watch);
    };
  } else if (input.numel() > 0 && input.is_cuda() && impl->has_nccl()) {
    pending->launch = [impl, input, output] {  // NCCL gathers straight into the flat output
      return allgather_flat(impl->backend_for(input.device()), output.view(-1), input.view(-1));
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
  return pending;
}

std::shared_ptr<PendingOp> plan_reduce_scatter(CommImpl* impl, torch::Tensor output, torch::Tensor input,
                                               ReduceOp op) {
  const int n = impl->size();
  auto pending = make_op(OpKind::kReduceScatter, input, op);
  torch::Tensor buf = input.contiguous();
  if (n == 1) {
    output.copy_(buf.view(output.sizes()));  // one rank: its input is the reduction (avg divides by 1)
    return nullptr;
  }
  // The choice of path may depend only on what every rank agreed on (dtype, shape), never on this
  // rank's output layout: an output of another layout or dtype gets a working copy.
  if (buf.numel() > 0 && impl->shm() && ShmTransport::can_reduce(buf)) {
    // The transport reads this rank's own block straight from the input: an output inside the input
    // (a view of this rank's block) gets a working copy.
    const bool direct =
        output.is_contiguous() && output.scalar_type() == buf.scalar_type() && !output.is_alias_of(buf);
    torch::Tensor out = direct ? output.view(-1) : torch::empty({buf.numel() / n}, buf.options());
    pending->shm = [out, buf, op](ShmTransport& shm, uint64_t fingerprint, const Watch& watch) {
      return shm.reduce_scatter(out, buf, op, fingerprint, watch);
    };
    pending->finish = [output, out, op, n, direct]() mutable {
      if (op == ReduceOp::kAvg) out.div_(n);
      if (!direct) output.copy_(out.view(output.sizes()));
    };
  } else if (buf.is_cuda() && impl->has_nccl()) {
    plan_native_reduce_scatter(impl, *pending, {output, buf, op, n});
  } else {
    plan_reduce_scatter_by_alltoall(impl, *pending, {output, buf, op, n});
  }
  return pending;
}

}  // namespace cohort::detail
