// HSDP in the Trainer: how many replicas the data-parallel ranks form (TrainerOptions::
// data_parallel_replicate_size, or one per node by default at stage 3) and their {replicate, shard}
// mesh, which ShardedInit and the ZeRO engine take their two Comms from.
#pragma once

#include <memory>

#include "cohort/mesh.h"
#include "cohort/world.h"
#include "trainer/options.h"

namespace cohort::detail {

/// The {replicate, shard} mesh over the data-parallel ranks (`tensor_parallel`'s "data_parallel"
/// axis, or the world without one), or null for one replica. Throws kInvalidArgument naming
/// data_parallel_replicate_size when it does not divide them. Collective over the world.
std::shared_ptr<Mesh> make_replica_mesh(const ResolvedOptions& options, const World& world,
                                        const std::shared_ptr<Mesh>& tensor_parallel);

}  // namespace cohort::detail
