// ZeRO stage 3: which units the engine shards and how their parameters are grouped (one flat group
// per unit with trainable parameters; root first, then the units in module order: see the note
// "launch order" in engine_impl.h). The units are found by unit_plan.h; this file applies the
// engine's rules to them: a Sequential model without marked units shards each of its entries (the
// engine's behaviour before units existed), ds_config's activation_checkpointing turns on every
// unit's recomputation, a parameter tied across two units is refused, and the shards of units
// made under cohort::ShardedInit are adopted as they are.
#include <torch/torch.h>

#include <algorithm>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "zero/engine_impl.h"

namespace cohort::detail {
namespace {

bool has_marked_units(const torch::nn::Module& root) {
  for (const auto& module : root.modules())
    if (find_unit(*module) != nullptr) return true;
  return false;
}

}  // namespace

void ZeroEngineImpl::plan_stage3_units(const EngineOptions& options) {
  UnitPolicy policy = options.unit_policy();
  const bool sequential_default = !policy && std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module_) &&
                                  !has_marked_units(*module_);
  if (sequential_default) policy = sequential_children();
  plan_ = plan_units(module_, policy, options.unit_options(), sequential_default);
  for (size_t u = 1; u < plan_.units.size(); ++u) {
    plan_.units[u]->attach(this, int64_t(u));
    if (config_.activation_checkpointing())
      plan_.units[u]->set_options(UnitOptions(plan_.units[u]->options()).activation_checkpointing(true));
  }
  ran_.assign(plan_.units.size(), 0);
  for (const auto& [name, first] : tied_) {
    const auto units = unit_of_parameters({name, first}, plan_.names);
    COHORT_CHECK_KIND(kInvalidArgument, units[0] == units[1], "ZeRO stage 3: parameter '", name,
                      "' is the same tensor as '", first, "', but they belong to different units ('",
                      plan_.names[size_t(units[0])], "' and '", plan_.names[size_t(units[1])],
                      "'); a shared parameter must live in one unit: mark their common "
                      "parent instead, or leave the modules that share it outside the units (the root)");
  }
  if (plan_.units.size() == 1)
    COHORT_INFO(
        "ZeRO stage 3: the model marks no sharding units; all its parameters form one unit, gathered "
        "for the whole forward and backward (mark blocks with cohort::fully_shard, or set "
        "EngineOptions::unit_policy, to gather one block at a time)");
}

std::vector<GroupLayout> ZeroEngineImpl::stage3_layouts() {
  const auto unit_of = unit_of_parameters(names_, plan_.names);
  std::vector<int64_t> numels;
  for (const auto& shape : shapes_) numels.push_back(c10::multiply_integers(shape));
  auto layouts = group_by_unit(numels, unit_of, world_);
  // Root first, then the units in module order, whatever order their parameters came in.
  std::stable_sort(layouts.begin(), layouts.end(), [&](const GroupLayout& a, const GroupLayout& b) {
    return unit_of[size_t(a.params[0])] < unit_of[size_t(b.params[0])];
  });
  unit_group_.assign(plan_.units.size(), -1);
  persistent_.assign(layouts.size(), 0);
  const int64_t threshold = config_.zero_optimization().stage3_param_persistence_threshold();
  for (size_t g = 0; g < layouts.size(); ++g) {
    unit_group_[size_t(unit_of[size_t(layouts[g].params[0])])] = int64_t(g);
    persistent_[g] = layouts[g].numel <= threshold;
  }
  return layouts;
}

ZeroEngineImpl::ShapeMap ZeroEngineImpl::construction_shapes(const torch::nn::Module& root) {
  ShapeMap shapes;
  for (const auto& module : root.modules()) {
    auto unit = find_unit(*module);
    if (unit == nullptr || unit->construction_shard() == nullptr) continue;
    const auto& record = *unit->construction_shard();
    for (size_t k = 0; k < record.params.size(); ++k)
      shapes.emplace(record.params[k].unsafeGetTensorImpl(), record.shapes[k]);
  }
  return shapes;
}

// Autograd checks each gradient against the shape and dtype a parameter had when its accumulator
// was made (register_hooks): give the emptied parameters their whole shape in the compute dtype for
// that moment, backed by one element (a stride-0 view), not by the memory of the whole unit.
void ZeroEngineImpl::show_whole_shapes(const ShapeMap& sharded_shapes) {
  for (auto& param : params_) {
    const auto found = sharded_shapes.find(param.unsafeGetTensorImpl());
    if (found == sharded_shapes.end()) continue;
    param.set_data(torch::zeros({1}, param.options().requires_grad(false)).expand(found->second));
  }
}

// Group `g`'s shard of this rank: the one its unit kept when it was made, or a slice of the
// parameters flattened now.
torch::Tensor ZeroEngineImpl::stage3_shard(int64_t g, const GroupLayout& layout, const torch::TensorOptions& options) {
  const auto unit = std::find(unit_group_.begin(), unit_group_.end(), g) - unit_group_.begin();
  auto record = size_t(unit) < plan_.units.size() && plan_.units[size_t(unit)] != nullptr
                    ? plan_.units[size_t(unit)]->construction_shard()
                    : nullptr;
  if (record == nullptr) {
    auto [begin, end] = layout.owned(rank_);
    return flatten(layout, options).narrow(0, begin, end - begin).clone();
  }
  const std::string& name = plan_.names[size_t(unit)];
  COHORT_CHECK_KIND(kInvalidArgument, record->shard.defined(), "ZeRO stage 3: unit '", name,
                    "' was sharded when it was made and an "
                    "earlier engine took its shard; build the model again for a new engine");
  COHORT_CHECK_KIND(kInvalidArgument, record->world_size == world_ && record->rank == rank_, "ZeRO stage 3: unit '",
                    name, "' was sharded as rank ", record->rank, " of ", record->world_size,
                    " (cohort::ShardedInit) but the "
                    "engine runs as rank ",
                    rank_, " of ", world_, "; give ShardedInitOptions and EngineOptions one Comm");
  bool same = record->params.size() == layout.params.size();
  for (size_t k = 0; same && k < layout.params.size(); ++k)
    same = params_[size_t(layout.params[k])].unsafeGetTensorImpl() == record->params[k].unsafeGetTensorImpl();
  COHORT_CHECK_KIND(kInvalidArgument, same, "ZeRO stage 3: unit '", name, "' was sharded with ", record->params.size(),
                    " parameter(s) when "
                    "it was made, but the engine finds ",
                    layout.params.size(),
                    " in it (a parameter changed requires_grad "
                    "since, or was replaced); make such changes before marking the unit");
  torch::Tensor shard = record->shard.to(options);
  record->shard = torch::Tensor();  // adopted: the engine's flat shard from now on
  return shard;
}

}  // namespace cohort::detail
