// Which sharding units a model has, for the ZeRO stage 3 engine (include/cohort/fsdp.h): the units
// its code marked with fully_shard, plus those a UnitPolicy picks among the modules Sequentials call
// (reached by routing each such Sequential entry through a proxy that makes the unit's call), and
// the unit of each trainable parameter. Unit 0 is the root: every parameter outside the marked units.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/fsdp.h"
#include "core/units.h"

namespace cohort::detail {

/// A Sequential entry routed through a unit; restore() puts the original module back.
struct SequentialRoute {
  std::shared_ptr<torch::nn::SequentialImpl> sequential;
  size_t index = 0;
  torch::nn::AnyModule original;
  std::shared_ptr<torch::nn::Module> proxy;
  void restore() const;
};

struct UnitPlan {
  std::vector<std::shared_ptr<UnitState>> units;  ///< [0] is null (the root); units in module order
  std::vector<std::string> names;                 ///< the units' module names ("" for the root)
  std::vector<SequentialRoute> routes;            ///< entries the policy routed (undone by the engine)
};

/// The units of `root`: marked ones and, when `policy` is set, those it picks (with `defaults`).
/// `root_children_only` limits the policy to the root's own entries when the root is a Sequential
/// (the engine's rule for a Sequential model without marked units).
UnitPlan plan_units(const std::shared_ptr<torch::nn::Module>& root, const UnitPolicy& policy,
                    const UnitOptions& defaults, bool root_children_only);

/// The unit of each parameter: the innermost unit whose module name prefixes the parameter's name.
std::vector<int64_t> unit_of_parameters(const std::vector<std::string>& param_names,
                                        const std::vector<std::string>& unit_names);

}  // namespace cohort::detail
