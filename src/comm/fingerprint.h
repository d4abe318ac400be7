// A collective's fingerprint: what every rank must agree on before data moves (op, reduce op, dtype,
// shape, root). Hashed with the sequence number for the control-plane agreement; described in full
// only when ranks disagree.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

enum class OpKind : uint8_t { kAllreduce, kBroadcast, kAllgather, kReduceScatter, kBarrier, kSend, kRecv, kAlltoall };

struct Fingerprint {
  OpKind op = OpKind::kBarrier;
  ReduceOp reduce = ReduceOp::kSum;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;
  int root = -1;      // broadcast root, or the peer of a send/recv
  int count = 1;      // tensors fused into this collective
  std::string label;  // the caller's name for it (comm/op_label.h), or ""

  /// FNV-1a over the fields that must match (a send matches the peer's recv) and `seq`.
  uint64_t hash(uint64_t seq) const;
  /// "allreduce(sum) float32 [3]", "broadcast(root 0) float32 [2, 2]", "send to 1 int64 [5]"; a
  /// negative dimension (one that may differ between ranks, as in uneven alltoall) prints as "*"; a
  /// label follows in quotes: "allreduce(avg) float32 [3] 'fc1.weight'".
  std::string describe() const;
  /// "float32 [2, 3]": the dtype and shape part of describe().
  std::string tensor_text() const;
};

const char* op_kind_name(OpKind op);
/// torch's spelling of a dtype: float32, bfloat16, int64, ...
std::string dtype_name(c10::ScalarType dtype);

}  // namespace cohort::detail
