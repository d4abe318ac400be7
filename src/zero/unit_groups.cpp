// ZeRO stage 3's units and their flat groups (unit_groups.h).
#include "zero/unit_groups.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/units.h"

namespace cohort::detail {
namespace {

bool has_marked_units(const torch::nn::Module& root) {
  for (const auto& module : root.modules())
    if (find_unit(*module) != nullptr) return true;
  return false;
}

}  // namespace

TrainableParameters::ShapeMap construction_shapes(const torch::nn::Module& root) {
  TrainableParameters::ShapeMap shapes;
  for (const auto& module : root.modules()) {
    auto unit = find_unit(*module);
    if (unit == nullptr || unit->construction_shard() == nullptr) continue;
    const auto& record = *unit->construction_shard();
    for (size_t k = 0; k < record.params.size(); ++k)
      shapes.emplace(record.params[k].unsafeGetTensorImpl(), record.shapes[k]);
  }
  return shapes;
}

UnitPlan plan_engine_units(const std::shared_ptr<torch::nn::Module>& module, const EngineOptions& options) {
  UnitPolicy policy = options.unit_policy();
  const bool sequential_default = !policy && std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module) &&
                                  !has_marked_units(*module);
  if (sequential_default) policy = sequential_children();
  return plan_units(module, policy, options.unit_options(), sequential_default);
}

UnitGroups group_units(UnitPlan plan, const TrainableParameters& params, const EngineSettings& settings) {
  UnitGroups out;
  out.plan = std::move(plan);
  const auto unit_of = unit_of_parameters(params.names(), out.plan.names);
  std::vector<int64_t> numels;
  for (int64_t i = 0; i < params.size(); ++i) numels.push_back(params.numel(i));
  out.layouts = group_by_unit(numels, unit_of, settings.world);
  // Root first, then the units in module order, whatever order their parameters came in.
  std::stable_sort(out.layouts.begin(), out.layouts.end(), [&](const GroupLayout& a, const GroupLayout& b) {
    return unit_of[size_t(a.params[0])] < unit_of[size_t(b.params[0])];
  });
  out.group_of_unit.assign(out.plan.units.size(), -1);
  out.persistent.assign(out.layouts.size(), 0);
  const int64_t threshold = settings.config.zero_optimization().stage3_param_persistence_threshold();
  for (size_t g = 0; g < out.layouts.size(); ++g) {
    out.group_of_unit[size_t(unit_of[size_t(out.layouts[g].params[0])])] = int64_t(g);
    out.persistent[g] = out.layouts[g].numel <= threshold;
  }
  return out;
}

}  // namespace cohort::detail
