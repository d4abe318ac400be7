// Small helpers the files of Comm share: building a PendingOp with its fingerprint, the byte view Gloo
// moves for dtypes it has no kernels for, c10d's reduce op for ours, and the first line of a c10 error.
#pragma once

#include <torch/types.h>

#include "comm/comm_impl.h"
#include "comm/op_label.h"

namespace cohort::detail {

// c10 exceptions carry a backtrace after the first line; the first line is the message.
inline std::string first_line(const char* what) {
  std::string text(what);
  return text.substr(0, text.find('\n'));
}

inline std::shared_ptr<PendingOp> make_op(OpKind kind, const torch::Tensor& tensor, ReduceOp reduce = ReduceOp::kSum,
                                          int root = -1) {
  auto op = std::make_shared<PendingOp>();
  op->fingerprint.op = kind;
  op->data.kind = kind;
  op->fingerprint.reduce = reduce;
  if (tensor.defined()) {
    op->fingerprint.dtype = tensor.scalar_type();
    op->fingerprint.shape = tensor.sizes().vec();
  }
  op->fingerprint.root = root;
  op->fingerprint.label = current_op_label();
  op->device_completion = tensor.defined() && tensor.is_cuda();
  return op;
}

// c10d's reduce op for ours (avg is sum followed by a division, done by the caller).
inline c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return c10d::ReduceOp::SUM;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

// Gloo moves bytes for broadcast/allgather/send/recv/all-to-all; give it a dtype it knows with the
// same width (no arithmetic happens on these, so the bytes arrive unchanged).
inline torch::Tensor transport_view(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kBFloat16) return t.view(torch::kHalf);
  if (t.scalar_type() == torch::kBool) return t.view(torch::kByte);
  return t;
}

}  // namespace cohort::detail
