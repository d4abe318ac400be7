// Pieces the built-in comm hooks share (comm_hook.cpp, powersgd.cpp): the averaging step of a plain
// reduction, done exactly as the reducer does it without a hook.
#pragma once

#include "cohort/comm_hooks.h"

namespace cohort::detail {

/// tensor *= 1 / divisor, as the reducer scales a bucket before its sum.
void average_in_place(torch::Tensor& tensor, int64_t divisor);
/// The plain reduction of a bucket (PyTorch's _allreduce_fut): scale, then one allreduce in place.
HookFuture allreduce_average(Comm& comm, const GradBucket& bucket);

}  // namespace cohort::detail
