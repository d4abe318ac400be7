// The elementwise reduction the shared-memory transport runs on each rank's slice: parts[0] op
// parts[1] op ... in rank order, into `out` (which may be parts[0] itself, element for element, as the
// hierarchy's step between hosts uses it, and aliases no other part), so every rank computes bitwise
// the same result. Small float32/float64 sums (gradients, the hot case) run in a plain loop
// the compiler vectorizes: LibTorch's dispatcher costs a few microseconds per call, which at 4 KiB is
// more than the whole transfer. Everything else goes through LibTorch's kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

/// `parts` point at `n` elements of `dtype` each; kAvg is a sum here (the caller divides).
void reduce_parts(void* out, const std::vector<const void*>& parts, int64_t n, at::ScalarType dtype, ReduceOp op);

}  // namespace cohort::detail
