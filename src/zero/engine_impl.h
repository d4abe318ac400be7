// The ZeRO engine behind cohort::ZeroEngineCore (include/cohort/zero.h): the owner of its parts, which
// it builds in order and wires together; each part has one job (docs/design/zero-engine.md):
//   EngineSettings       engine_settings.h       the config, the Comm, the facts derived from them
//   TrainableParameters  trainable_parameters.h  the parameters, their names, whole shapes and data
//   StateStore           state_store.h           the flat groups, and where each kind of state lives
//   ReduceScheduler      reduce_scheduler.h      backward's reductions, launched and retired in order
//   UnitCoordinator      unit_coordinator.h      stage 3: gathers, prefetches and frees the units
//   ShardOptimizer       shard_optimizer.h       the step at the accumulation boundary
//   EngineCheckpoint     engine_checkpoint.h     checkpoint state and the full parameters
//
// Trainable parameters are laid out in flat groups (partition.h), rank r owning shard r of each.
//   stage 0: every rank holds everything; gradients are allreduced at the accumulation boundary.
//   stage 1: parameters and gradients whole; at the boundary each group's gradients are
//            reduce-scattered, each rank updates its shard, the shards are all-gathered back.
//   stage 2: as 1, but a group's gradients are reduce-scattered as soon as backward produced them
//            and then dropped, so only this rank's gradient shard outlives backward.
//   stage 3: as 2, and each group (one sharding unit, include/cohort/fsdp.h; unit 0 is the root:
//            every parameter outside the marked units) keeps only its parameter shard; the whole
//            parameters are all-gathered before the unit's forward and again before its backward
//            (the next unit's gather is prefetched, in the order the last forward ran the units),
//            and freed after (unit_coordinator.h). The root's stay gathered from forward to the end
//            of backward.
// The optimizer steps on fp32 master shards: the flat parameters' own shard in fp32 training,
// a separate fp32 copy with bf16/fp16 compute.
//
// Note "launch order": every rank must issue the same collectives in the same order. Stage 2/3
// reduce-scatters are launched strictly from the last group to the first (the order backward
// produces them), a group waiting for all groups after it (ReduceScheduler); the stage 3 gathers
// follow the unit order of forward and the reverse unit order of backward, which autograd runs the
// same way on every rank (UnitCoordinator). Groups are numbered root first, then the units in module
// order, so a model whose blocks run in the order they were registered reduces each block as soon as
// its backward ends.
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "cohort/zero.h"
#include "core/grad_kit.h"
#include "zero/engine_checkpoint.h"
#include "zero/engine_settings.h"
#include "zero/reduce_scheduler.h"
#include "zero/shard_optimizer.h"
#include "zero/state_store.h"
#include "zero/trainable_parameters.h"
#include "zero/unit_coordinator.h"

namespace cohort::detail {

class ZeroEngineImpl {
 public:
  ZeroEngineImpl(std::shared_ptr<torch::nn::Module> module, ZeroConfig config, EngineOptions options);
  ~ZeroEngineImpl();
  ZeroEngineImpl(const ZeroEngineImpl&) = delete;
  ZeroEngineImpl& operator=(const ZeroEngineImpl&) = delete;

  void backward(const torch::Tensor& loss);
  void step() { optimizer_->step(); }
  /// ZeroEngineCore::sum_tied_gradient.
  void sum_tied_gradient(const std::string& name, Comm& comm);
  torch::Tensor to_compute(const torch::Tensor& t) const;
  /// A forward of the whole model (ZeroEngineCore::ForwardScope): the stage 3 coordinator's.
  void begin_forward();
  void end_forward() noexcept;
  MemoryReport memory_report() const;

  const ZeroConfig& config() const { return settings_.config; }
  int stage() const { return settings_.stage; }
  torch::Dtype compute_dtype() const { return settings_.compute_dtype; }
  ShardOptimizer& shard_optimizer() const { return *optimizer_; }
  EngineCheckpoint& checkpoint() const { return *checkpoint_; }

 private:
  void broadcast_model_state();
  void check_replicas() const;
  void build_groups(std::vector<GroupLayout> layouts);
  void on_gradient_ready(int64_t param);

  std::shared_ptr<torch::nn::Module> module_;
  EngineSettings settings_;
  // The parts, in the order they are built (each refers to those before it).
  std::unique_ptr<TrainableParameters> params_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<UnitCoordinator> coordinator_;  // stage 3 only
  std::unique_ptr<ReduceScheduler> scheduler_;
  std::unique_ptr<ShardOptimizer> optimizer_;
  std::unique_ptr<EngineCheckpoint> checkpoint_;
  GradHookSet hooks_;  // last: destroyed first, so no hook runs into a half-destroyed engine
};

}  // namespace cohort::detail
