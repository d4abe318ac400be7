// The ZeRO engine's state under tensor parallelism: each tensor-parallel rank's engine holds its own
// parameters' parts (flat groups of the cut layers), sharded over its data-parallel group. Saved under
// names of its own ("tp<k>.group0.master"), a checkpoint holds every tp rank's state side by side; a
// tensor the engine keeps whole (frozen parameters, buffers) is held by that tp rank's replicas only,
// so it is saved as theirs (StateKind::kOwned), not as one every rank holds.
#pragma once

#include <memory>

#include "cohort/stateful.h"

namespace cohort::detail {

/// Around `inner` (which must outlive it): its tensors renamed "tp<tp_rank>.<name>", its replicated
/// ones made owned; its numbers (the same on every rank) unchanged.
std::shared_ptr<Stateful> tensor_parallel_rank_state(Stateful& inner, int tp_rank);

}  // namespace cohort::detail
