// The transports of one host and of c10d (comm/transport.h): the shared-memory segment's collectives
// (ShmCollectives, over ShmTransport) and a c10d process group (C10dTransport: Gloo for CPU tensors,
// NCCL for CUDA ones). The hierarchical transport across hosts is in comm/hier_transport.h.
#pragma once

#include <memory>

#include "comm/shm_transport.h"
#include "comm/transport.h"
#include "compat/c10d_compat.h"

namespace cohort::detail {

/// Allreduce, reduce_scatter, allgather and broadcast of contiguous CPU tensors through the segment
/// every rank of the Comm mapped; agrees on the fingerprint at the data's first barrier.
class ShmCollectives : public Transport {
 public:
  explicit ShmCollectives(ShmTransport& shm) : shm_(shm) {}
  const char* name() const override { return "shm"; }
  bool can_run(const OpData& op) const override { return segment_runs(op); }
  bool agrees() const override { return true; }
  int64_t agreed_us() const override { return shm_.agreed_us(); }
  Started start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) override;
  /// Whether a shared-memory segment moves `op` (CPU, a dtype it reduces): the hierarchical transport's
  /// rule too, whose steps within a host are this segment's.
  static bool segment_runs(const OpData& op);

 private:
  ShmTransport& shm_;
};

/// Every op on a c10d process group: the fallback for what no faster transport runs.
class C10dTransport : public Transport {
 public:
  /// `nccl`: the group is NCCL's (CUDA tensors only, native reduce-scatter and flat all-gather).
  C10dTransport(ProcessGroupBase& group, int size, bool nccl) : group_(group), size_(size), nccl_(nccl) {}
  const char* name() const override { return nccl_ ? "nccl" : "gloo"; }
  bool can_run(const OpData& op) const override;
  Started start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) override;

 private:
  Started reduce_scatter(const OpData& op);
  Started allgather(const OpData& op);
  ProcessGroupBase& group_;
  int size_;
  bool nccl_;
};

/// Reduces the `parts` rows of `chunks` (parts x n) into `out` (n elements) with `op`; kAvg sums and
/// then divides by `divisor`. Half and bfloat16 are reduced in float32.
void reduce_rows(const at::Tensor& chunks, const at::Tensor& out, ReduceOp op, int divisor);

}  // namespace cohort::detail
