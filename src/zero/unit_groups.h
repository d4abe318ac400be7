// ZeRO stage 3's units and their flat groups: which units the engine shards, and how their
// parameters are grouped (one flat group per unit with trainable parameters; root first, then the
// units in module order: see the note "launch order" in engine_impl.h). The units are found by
// unit_plan.h; this applies the engine's rules to them: a Sequential model without marked units
// shards each of its entries (the engine's behaviour before units existed), and a unit of at most
// stage3_param_persistence_threshold elements stays whole. Planning only: the unit coordinator
// (unit_coordinator.h) takes the result and attaches itself to the units.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/partition.h"
#include "zero/trainable_parameters.h"
#include "zero/unit_plan.h"

namespace cohort::detail {

struct UnitGroups {
  UnitPlan plan;
  std::vector<GroupLayout> layouts;    ///< root's first, then the units' in module order
  std::vector<int64_t> group_of_unit;  ///< per unit: its group, -1 without trainable parameters
  std::vector<char> persistent;        ///< per group: small enough to stay whole (never freed)
};

/// The whole shapes of the parameters of units sharded as they were made (cohort::ShardedInit).
TrainableParameters::ShapeMap construction_shapes(const torch::nn::Module& root);

/// The units of `module` the engine shards: those it marked, those options.unit_policy() picks, and
/// without either, a Sequential model's entries.
UnitPlan plan_engine_units(const std::shared_ptr<torch::nn::Module>& module, const EngineOptions& options);

/// The flat groups of `plan`'s units over `params`, and which unit owns which group.
UnitGroups group_units(UnitPlan plan, const TrainableParameters& params, const EngineSettings& settings);

}  // namespace cohort::detail
