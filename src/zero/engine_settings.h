// What every part of the ZeRO engine reads and none changes: the ds_config, the Comm it shards over,
// and the facts derived from them once (stage, ranks, dtypes, where each kind of state lives).
// ZeroEngineImpl owns one and hands each part a const reference.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>

#include "cohort/comm.h"
#include "cohort/zero.h"
#include "cohort/zero_config.h"

namespace cohort::detail {

/// Where a kind of state lives between its uses. kDevice: with the parameters (a GPU, or the CPU of
/// a CPU run); kHost: host memory; kFile: a swap file under nvme_path, lent a group at a time
/// (docs/design/zero-engine.md, "Where offload plugs in").
enum class Tier { kDevice, kHost, kFile };

/// Where the state store (state_store.h) keeps each kind of state.
struct StatePlacement {
  /// The fp32 masters, and with them the optimizer state (LibTorch makes it beside its parameter):
  /// kHost with offload_optimizer.device cpu, kFile with nvme.
  Tier masters = Tier::kDevice;
  /// Stage 3's compute-dtype parameter shards between gathers: kHost with offload_param.device cpu,
  /// kFile with nvme (the units past offload_param.max_in_cpu elements; the first stay in memory).
  Tier parameter_shards = Tier::kDevice;
};

struct EngineSettings {
  ZeroConfig config;
  std::shared_ptr<Comm> comm;
  int stage = 0;
  int gas = 1;  ///< gradient_accumulation_steps
  int rank = 0;
  int world = 1;  ///< ranks of `comm`, the shard group
  /// HSDP (EngineOptions::replicate_comm): the ranks holding the same shard as this one, and how many.
  std::shared_ptr<Comm> replicate;
  int replicas = 1;
  /// Every rank whose gradients are averaged: the shard group times the replicas.
  int data_parallel() const { return world * replicas; }
  torch::Dtype compute_dtype = torch::kFloat;
  torch::Dtype comm_dtype = torch::kFloat;  ///< communication_data_type, or the compute dtype
  bool separate_master = false;             ///< mixed precision: fp32 master copies apart from the parameters
  int64_t prefetch_units = 0;               ///< EngineOptions::prefetch_units (0: no limit but the bucket's)
  StatePlacement placement;
};

/// The settings of an engine built with `config` and `options` (its Comm resolved: the world's when
/// none is given). Throws kInvalidArgument naming the key whose value is out of range.
EngineSettings make_engine_settings(ZeroConfig config, const EngineOptions& options);

}  // namespace cohort::detail
