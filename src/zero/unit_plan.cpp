// Finding a model's sharding units (see unit_plan.h).
#include "zero/unit_plan.h"

#include <unordered_map>
#include <unordered_set>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {
namespace {

// Calls the original module through its unit: what a Sequential runs in place of a routed entry.
struct UnitProxyImpl : torch::nn::Module {
  UnitProxyImpl(torch::nn::AnyModule original, std::shared_ptr<UnitState> state)
      : original_(std::move(original)), state_(std::move(state)) {}
  torch::Tensor forward(torch::Tensor x) {
    UnitCall call(*state_);
    torch::Tensor out;
    if (call.checkpointed()) {
      out = checkpoint([this](const torch::Tensor& in) { return original_.forward(in); }, x);
    } else {
      out = original_.forward(x);
    }
    return call.output(out);
  }
  torch::nn::AnyModule original_;
  std::shared_ptr<UnitState> state_;
};

void route_sequential(const std::shared_ptr<torch::nn::SequentialImpl>& sequential, const std::string& prefix,
                      const UnitPolicy& policy, const UnitOptions& defaults, UnitPlan& plan) {
  size_t index = 0;
  for (auto it = sequential->begin(); it != sequential->end(); ++it, ++index) {
    auto module = it->ptr();
    if (find_unit(*module) != nullptr || dynamic_cast<UnitProxyImpl*>(module.get()) != nullptr) continue;
    std::string name;
    for (const auto& child : sequential->named_children())
      if (child.value().get() == module.get()) name = prefix.empty() ? child.key() : prefix + "." + child.key();
    if (!policy(name, *module)) continue;
    auto state = register_unit(module, defaults);
    auto proxy = std::make_shared<UnitProxyImpl>(*it, state);
    plan.routes.push_back(SequentialRoute{sequential, index, *it, proxy});
    *it = torch::nn::AnyModule(proxy);
  }
}

}  // namespace

void SequentialRoute::restore() const {
  if (index < sequential->size() && sequential->begin()[std::ptrdiff_t(index)].ptr() == proxy)
    sequential->begin()[std::ptrdiff_t(index)] = original;
}

UnitPlan plan_units(const std::shared_ptr<torch::nn::Module>& root, const UnitPolicy& policy,
                    const UnitOptions& defaults, bool root_children_only) {
  UnitPlan plan;
  if (policy) {
    if (root_children_only) {
      if (auto sequential = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(root))
        route_sequential(sequential, "", policy, defaults, plan);
    } else {
      for (const auto& item : root->named_modules())
        if (auto sequential = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(item.value()))
          route_sequential(sequential, item.key(), policy, defaults, plan);
    }
  }
  plan.units.push_back(nullptr);
  plan.names.emplace_back();
  std::unordered_set<const UnitState*> seen;
  for (const auto& item : root->named_modules()) {
    auto state = find_unit(*item.value());
    if (state == nullptr || !seen.insert(state.get()).second) continue;
    COHORT_CHECK_KIND(kInvalidArgument, !item.key().empty(),
                      "ZeRO stage 3: the model itself is marked as a unit; its parameters "
                      "outside the marked blocks are the root unit already: mark its blocks");
    plan.units.push_back(std::move(state));
    plan.names.push_back(item.key());
  }
  return plan;
}

std::vector<int64_t> unit_of_parameters(const std::vector<std::string>& param_names,
                                        const std::vector<std::string>& unit_names) {
  std::vector<int64_t> unit_of;
  for (const auto& name : param_names) {
    int64_t best = 0;
    size_t best_length = 0;
    for (size_t u = 1; u < unit_names.size(); ++u) {
      const auto& prefix = unit_names[u];
      if (prefix.size() + 1 > name.size() || prefix.size() < best_length) continue;
      if (name.compare(0, prefix.size(), prefix) == 0 && name[prefix.size()] == '.') {
        best = int64_t(u);
        best_length = prefix.size();
      }
    }
    unit_of.push_back(best);
  }
  return unit_of;
}

}  // namespace cohort::detail
