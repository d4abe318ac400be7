// Which Comm a strategy, the sampler or a checkpoint uses, answered one way everywhere: the Comm
// given, else the world of cohort::init(), else a world of one (a lone process), with a warning when
// a launcher's variables say this process is one rank of many.
#pragma once

#include <memory>

#include "cohort/comm.h"

namespace cohort::detail {

/// `given` when set; the world's Comm after cohort::init(); else a world of one. `who` names the
/// caller in the warning ("DistributedDataParallel", ...).
std::shared_ptr<Comm> resolve_comm(std::shared_ptr<Comm> given, const char* who);

}  // namespace cohort::detail
