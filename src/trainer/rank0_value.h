// Decisions every rank must take alike (save a top-k checkpoint, stop early) are taken on rank 0's
// value of the metric: a metric logged without sync_dist may differ between ranks.
#pragma once

#include <torch/torch.h>

#include "cohort/ddp.h"
#include "cohort/world.h"

namespace cohort::detail {

/// `value` as rank 0 has it, on every rank (a collective).
inline double rank0_value(const World& world, double value) {
  if (world.size() == 1) return value;
  const auto sum = reduce_metrics({torch::tensor(world.is_main() ? value : 0.0, torch::kFloat64)}, &world.comm());
  return sum[0].item<double>();
}

}  // namespace cohort::detail
