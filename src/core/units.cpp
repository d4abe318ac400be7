// Sharding units (see units.h): the registry from module to unit, the options, and one call of a unit.
#include "core/units.h"

#include <iterator>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"

namespace cohort::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::weak_ptr<UnitState>> units;
};

// "ns::(anonymous namespace)::BlockImpl" -> "BlockImpl": the type as the user wrote it.
std::string type_name(const torch::nn::Module& module) {
  const std::string& full = module.name();
  const auto colon = full.rfind("::");
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: units may outlive static destruction
  return *r;
}

thread_local UnitSharder* active_sharder = nullptr;

}  // namespace

void UnitState::attach(UnitOwner* owner, int64_t index) {
  COHORT_CHECK_KIND(kInvalidArgument, owner_ == nullptr || owner_ == owner, "sharding unit ", type_name(*module_),
                    ": already sharded by another engine; a module can belong to one ZeRO stage 3 engine at a time");
  owner_ = owner;
  index_ = index;
}

void UnitState::detach(const UnitOwner* owner) {
  if (owner_ != owner) return;
  owner_ = nullptr;
  index_ = -1;
}

UnitSharder* install_unit_sharder(UnitSharder* sharder) { return std::exchange(active_sharder, sharder); }

std::shared_ptr<UnitState> register_unit(std::shared_ptr<torch::nn::Module> module, UnitOptions options) {
  COHORT_CHECK_KIND(kInvalidArgument, module != nullptr, "cohort::fully_shard: the module is null");
  std::shared_ptr<UnitState> state;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto& slot = r.units[module.get()];
    COHORT_CHECK_KIND(kInvalidArgument, slot.expired(), "cohort::fully_shard: this ", type_name(*module),
                      " is already a unit; mark each module once (keep the Unit handle and call it)");
    // Drop entries of units that are gone, so addresses reused by new modules start clean.
    for (auto it = r.units.begin(); it != r.units.end();)
      it = it->second.expired() && it->first != module.get() ? r.units.erase(it) : std::next(it);
    state = std::make_shared<UnitState>(std::move(module), std::move(options));
    slot = state;
  }
  // Outside the lock: sharding runs collectives, and finds the units nested in this one.
  if (active_sharder != nullptr) state->set_construction_shard(active_sharder->shard(*state));
  return state;
}

std::shared_ptr<UnitState> find_unit(const torch::nn::Module& module) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.units.find(&module);
  return it == r.units.end() ? nullptr : it->second.lock();
}

const UnitOptions& unit_options(const UnitState& state) { return state.options(); }
void set_unit_options(UnitState& state, UnitOptions options) { state.set_options(std::move(options)); }

UnitCall::UnitCall(UnitState& state) : state_(state) {
  if (state_.owner() == nullptr) {
    COHORT_CHECK_KIND(kInvalidArgument, state_.construction_shard() == nullptr, "sharding unit ",
                      type_name(state_.module()),
                      ": its parameters were sharded when it was made (cohort::ShardedInit), so it runs only inside "
                      "a ZeRO stage 3 engine (cohort::initialize with zero_optimization.stage 3), called through "
                      "engine.forward");
    return;
  }
  state_.owner()->before_forward(state_.index());
  engine_call_ = true;
}

UnitCall::~UnitCall() {
  if (engine_call_ && state_.owner() != nullptr) state_.owner()->after_forward(state_.index());
}

torch::Tensor UnitCall::output(const torch::Tensor& t) {
  if (!engine_call_ || state_.owner() == nullptr) return t;
  return state_.owner()->mark_output(state_.index(), t);
}

bool UnitCall::checkpointed() const { return state_.options().activation_checkpointing(); }

}  // namespace cohort::detail

namespace cohort {

UnitPolicy sequential_children() {
  return [](const std::string&, const torch::nn::Module& module) { return !module.parameters().empty(); };
}

}  // namespace cohort
