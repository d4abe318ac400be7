// The PendingOp of each collective (see collective_plans.h): the op as plain data (OpData) and the
// transport that runs it (CommImpl::transport_for). Non-contiguous tensors go through a contiguous
// copy, bfloat16 is reduced in float32 off the GPU (Gloo has no bfloat16 kernels); the transport
// completes the op (avg included) and finish() writes a working copy back.
#include "comm/collective_plans.h"

#include <ATen/ATen.h>

#include "comm/op_util.h"

namespace cohort::detail {
namespace {

// The tensor the transport works on: `t` itself when it can, else a contiguous (and for reductions on
// CPU, bfloat16 -> float32) copy that finish() writes back.
torch::Tensor working_copy(const torch::Tensor& t, bool reduction) {
  torch::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  if (reduction && buf.is_cpu() && buf.scalar_type() == torch::kBFloat16) buf = buf.to(torch::kFloat);
  return buf;
}

// Hands the op's data to the transport that runs it; none when there is nothing to move (only the
// agreement happens then, as for a barrier).
void choose(CommImpl* impl, PendingOp& pending, bool moves) {
  if (moves) pending.transport = impl->transport_for(pending.data);
}

// finish(): `buf`'s result back into `tensor` when the transport worked on a copy.
void copy_back(PendingOp& pending, torch::Tensor tensor, torch::Tensor buf) {
  if (buf.is_same(tensor)) return;
  pending.finish = [tensor, buf]() mutable { tensor.copy_(buf); };
}

}  // namespace

std::shared_ptr<PendingOp> plan_allreduce(CommImpl* impl, torch::Tensor tensor, ReduceOp op) {
  auto pending = make_op(OpKind::kAllreduce, tensor, op);
  torch::Tensor buf = working_copy(tensor, true);
  pending->data.reduce = op;
  pending->data.buffer = buf;
  choose(impl, *pending, buf.numel() > 0);
  copy_back(*pending, tensor, buf);
  return pending;
}

std::shared_ptr<PendingOp> plan_broadcast(CommImpl* impl, torch::Tensor tensor, int root) {
  auto pending = make_op(OpKind::kBroadcast, tensor, ReduceOp::kSum, root);
  torch::Tensor buf = working_copy(tensor, false);
  pending->data.root = root;
  pending->data.buffer = buf;
  choose(impl, *pending, buf.numel() > 0);
  copy_back(*pending, tensor, buf);
  return pending;
}

std::shared_ptr<PendingOp> plan_allgather(CommImpl* impl, torch::Tensor output, torch::Tensor tensor) {
  auto pending = make_op(OpKind::kAllgather, tensor);
  torch::Tensor input = working_copy(tensor, false);
  if (impl->size() == 1) {
    output.view_as(input).copy_(input);
    return nullptr;
  }
  pending->data.buffer = input;
  pending->data.output = output;
  choose(impl, *pending, input.numel() > 0);
  return pending;
}

std::shared_ptr<PendingOp> plan_reduce_scatter(CommImpl* impl, torch::Tensor output, torch::Tensor input, ReduceOp op) {
  const int n = impl->size();
  auto pending = make_op(OpKind::kReduceScatter, input, op);
  torch::Tensor buf = input.contiguous();
  if (n == 1) {
    output.copy_(buf.view(output.sizes()));  // one rank: its input is the reduction (avg divides by 1)
    return nullptr;
  }
  // The choice of transport may depend only on what every rank agreed on (dtype, shape), never on this
  // rank's output layout: an output of another layout or dtype, or one inside the input (transports
  // read this rank's own block straight from the input), gets a working copy.
  const bool direct = output.is_contiguous() && output.scalar_type() == buf.scalar_type() && !output.is_alias_of(buf);
  torch::Tensor out = direct ? output.view(-1) : torch::empty({buf.numel() / n}, buf.options());
  pending->data.reduce = op;
  pending->data.buffer = buf;
  pending->data.output = out;
  choose(impl, *pending, buf.numel() > 0);
  if (!direct) pending->finish = [output, out]() mutable { output.copy_(out.view(output.sizes())); };
  return pending;
}

}  // namespace cohort::detail
