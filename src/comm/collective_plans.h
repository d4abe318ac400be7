// How each collective of cohort::Comm becomes a PendingOp: its fingerprint, its data as plain fields
// (OpData), the transport that runs it (comm/transport.h: hierarchical across hosts, shared memory on
// one host, NCCL for CUDA tensors, Gloo otherwise) and the finish step (copy back). Arguments are
// checked by Comm before a plan is made. A null plan: nothing left to move (a world of one). Comm's
// blocking calls run the plan on the caller's thread, its async calls hand it to the launcher thread
// (CommImpl::submit).
#pragma once

#include <torch/types.h>

#include <memory>

#include "comm/comm_impl.h"

namespace cohort::detail {

std::shared_ptr<PendingOp> plan_allreduce(CommImpl* impl, torch::Tensor tensor, ReduceOp op);
std::shared_ptr<PendingOp> plan_broadcast(CommImpl* impl, torch::Tensor tensor, int root);
/// `output`: contiguous, size() x the input's elements.
std::shared_ptr<PendingOp> plan_allgather(CommImpl* impl, torch::Tensor output, torch::Tensor tensor);
std::shared_ptr<PendingOp> plan_reduce_scatter(CommImpl* impl, torch::Tensor output, torch::Tensor input, ReduceOp op);

}  // namespace cohort::detail
