// Broadcast of many tensors (parameters at DDP construction, buffers after each step) as flat
// buffers per dtype and device of at most kBroadcastBucketBytes: one collective per bucket instead
// of one per tensor, and no second copy of a whole large model (PyTorch DDP buckets by 250 MiB).
#pragma once

#include <torch/types.h>

#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

/// The largest flat buffer a broadcast_coalesced builds (a larger tensor goes alone, as itself).
inline constexpr int64_t kBroadcastBucketBytes = int64_t(250) << 20;

/// Copies `root`'s values of `tensors` into every rank's, in place (without recording autograd).
/// Buckets of at most `bucket_bytes` (tests use small ones).
void broadcast_coalesced(Comm& comm, const std::vector<torch::Tensor>& tensors, int root,
                         int64_t bucket_bytes = kBroadcastBucketBytes);

}  // namespace cohort::detail
