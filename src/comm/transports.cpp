// The shared-memory and c10d transports (see transports.h). Gloo in LibTorch 1.13 has no
// reduce_scatter: an all-to-all moves chunk j to rank j (the bytes a ring reduce-scatter moves) and
// each rank reduces its n chunks locally; NCCL reduces and scatters natively.
#include "comm/transports.h"

#include <ATen/ATen.h>

#include "comm/op_util.h"
#include "core/check.h"

namespace cohort::detail {

void reduce_rows(const at::Tensor& chunks_in, const at::Tensor& out, ReduceOp op, int divisor) {
  at::Tensor chunks = chunks_in;
  const bool upcast = chunks.scalar_type() == at::kBFloat16 || chunks.scalar_type() == at::kHalf;
  if (!upcast && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    // Straight into the output: no temporary and no second copy (the ZeRO engine's hot path).
    at::Tensor flat = out;
    at::sum_out(flat, chunks, std::vector<int64_t>{0});
    if (op == ReduceOp::kAvg) flat.div_(divisor);
    return;
  }
  if (upcast) chunks = chunks.to(at::kFloat);
  at::Tensor reduced;
  switch (op) {
    case ReduceOp::kSum: reduced = chunks.sum(0); break;
    case ReduceOp::kAvg: reduced = chunks.sum(0).div_(divisor); break;
    case ReduceOp::kMin: reduced = std::get<0>(chunks.min(0)); break;
    case ReduceOp::kMax: reduced = std::get<0>(chunks.max(0)); break;
    case ReduceOp::kProduct: reduced = chunks.prod(0); break;
  }
  out.copy_(reduced);
}

bool ShmCollectives::segment_runs(const OpData& op) {
  switch (op.kind) {
    case OpKind::kAllreduce:
    case OpKind::kReduceScatter: return ShmTransport::can_reduce(op.buffer);
    case OpKind::kBroadcast: return ShmTransport::can_move(op.buffer);
    case OpKind::kAllgather: return ShmTransport::can_move(op.buffer) && op.output.is_cpu();
    default: return false;
  }
}

Started ShmCollectives::start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) {
  Started started;
  switch (op.kind) {
    case OpKind::kAllreduce:
      started.agreed = shm_.allreduce(op.buffer, op.reduce, fingerprint, watch);
      if (started.agreed && op.reduce == ReduceOp::kAvg) op.buffer.div_(shm_.size());
      break;
    case OpKind::kReduceScatter:
      started.agreed = shm_.reduce_scatter(op.output, op.buffer, op.reduce, fingerprint, watch);
      if (started.agreed && op.reduce == ReduceOp::kAvg) op.output.div_(shm_.size());
      break;
    case OpKind::kAllgather: started.agreed = shm_.allgather(op.output, op.buffer, fingerprint, watch); break;
    case OpKind::kBroadcast: started.agreed = shm_.broadcast(op.buffer, op.root, fingerprint, watch); break;
    default: break;
  }
  return started;
}

bool C10dTransport::can_run(const OpData& op) const {
  const at::Tensor& t = op.buffer.defined() ? op.buffer : op.output;
  return nccl_ ? t.is_cuda() : true;
}

Started C10dTransport::start(const OpData& op, uint64_t, const ShmWatch&) {
  const c10::Device device = (op.buffer.defined() ? op.buffer : op.output).device();
  COHORT_CHECK_KIND(kInvalidArgument, device.is_cpu() || device.is_cuda(), "collectives take CPU or CUDA tensors, not ",
                    device);
  Started started;
  switch (op.kind) {
    case OpKind::kAllreduce: {
      std::vector<at::Tensor> tensors{op.buffer};
      c10d::AllreduceOptions options;
      options.reduceOp = to_c10d(op.reduce);
      started.work = group_.allreduce(tensors, options);
      if (op.reduce == ReduceOp::kAvg) started.then = [buffer = op.buffer, n = size_]() mutable { buffer.div_(n); };
      return started;
    }
    case OpKind::kBroadcast: {
      std::vector<at::Tensor> tensors{transport_view(op.buffer)};
      c10d::BroadcastOptions options;
      options.rootRank = op.root;
      started.work = group_.broadcast(tensors, options);
      return started;
    }
    case OpKind::kAllgather: return allgather(op);
    case OpKind::kReduceScatter: return reduce_scatter(op);
    case OpKind::kAlltoall: {
      auto out = transport_view(op.output);
      auto in = transport_view(op.buffer);
      std::vector<int64_t> output_splits = op.output_splits, input_splits = op.input_splits;
      c10d::AllToAllOptions options;
      started.work = group_.alltoall_base(out, in, output_splits, input_splits, options);
      return started;
    }
    case OpKind::kSend: {
      std::vector<at::Tensor> tensors{op.buffer};
      started.work = group_.send(tensors, op.peer, op.p2p_tag);
      return started;
    }
    case OpKind::kRecv: {
      std::vector<at::Tensor> tensors{transport_view(op.buffer)};
      started.work = group_.recv(tensors, op.peer, op.p2p_tag);
      return started;
    }
    case OpKind::kBarrier: return started;
  }
  return started;
}

Started C10dTransport::allgather(const OpData& op) {
  Started started;
  if (nccl_) {  // NCCL gathers straight into the flat output
    started.work = allgather_flat(group_, op.output.view(-1), op.buffer.view(-1));
    return started;
  }
  std::vector<int64_t> shape{size_};
  for (auto d : op.buffer.sizes()) shape.push_back(d);
  std::vector<std::vector<at::Tensor>> outputs(1, transport_view(op.output).view(shape).unbind(0));
  std::vector<at::Tensor> inputs{transport_view(op.buffer)};
  started.work = group_.allgather(outputs, inputs);
  return started;
}

Started C10dTransport::reduce_scatter(const OpData& op) {
  Started started;
  const int n = size_;
  if (nccl_) {  // the output is the only receive buffer: ZeRO's memory saving holds on the GPU
    started.work = reduce_scatter_flat(group_, op.output, op.buffer.view(-1), to_c10d(op.reduce));
    if (op.reduce == ReduceOp::kAvg) started.then = [out = op.output, n]() mutable { out.div_(n); };
    return started;
  }
  auto received = at::empty_like(op.buffer);
  std::vector<int64_t> no_splits;
  auto out = transport_view(received);
  auto in = transport_view(op.buffer);
  c10d::AllToAllOptions options;
  started.work = group_.alltoall_base(out, in, no_splits, no_splits, options);
  started.then = [received, output = op.output, reduce = op.reduce, n] {
    reduce_rows(received.view({n, -1}), output, reduce, n);
  };
  return started;
}

}  // namespace cohort::detail
