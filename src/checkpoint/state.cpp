// CheckpointState: the list of named state holders that save_checkpoint/load_checkpoint walk.
#include <utility>

#include "checkpoint/entry.h"
#include "cohort/error.h"
#include "core/check.h"

namespace cohort {

CheckpointState::CheckpointState() = default;
CheckpointState::~CheckpointState() = default;
CheckpointState::CheckpointState(CheckpointState&&) noexcept = default;
CheckpointState& CheckpointState::operator=(CheckpointState&&) noexcept = default;

namespace {

void check_name(const std::vector<CheckpointState::Entry>& entries, const std::string& name) {
  COHORT_CHECK_KIND(kInvalidArgument, !name.empty() && name.find('/') == std::string::npos && name != "rng",
                    "CheckpointState::add: the name '", name, "' is empty, contains '/' or is the reserved name 'rng'");
  for (const auto& entry : entries) {
    COHORT_CHECK_KIND(kInvalidArgument, entry.name != name, "CheckpointState::add: the name '", name,
                      "' is used twice");
  }
}

}  // namespace

CheckpointState& CheckpointState::add(const std::string& name, torch::nn::Module& module) {
  return add(name, detail::ckpt::module_state(module));
}

CheckpointState& CheckpointState::add(const std::string& name, torch::optim::Optimizer& optimizer) {
  add(name, detail::ckpt::optimizer_state(name, optimizer));
  entries_.back().tensors_optional = true;
  return *this;
}

CheckpointState& CheckpointState::add(const std::string& name, torch::optim::LRScheduler& scheduler) {
  return add(name, detail::ckpt::scheduler_state(scheduler));
}

CheckpointState& CheckpointState::add(const std::string& name, DistributedSampler& sampler, int64_t& samples_in_epoch) {
  return add(name, detail::ckpt::sampler_state(name, sampler, samples_in_epoch));
}

CheckpointState& CheckpointState::add(const std::string& name, Stateful& stateful) {
  check_name(entries_, name);
  entries_.push_back(Entry{name, &stateful, nullptr, false});
  return *this;
}

CheckpointState& CheckpointState::add(const std::string& name, std::shared_ptr<Stateful> stateful) {
  COHORT_CHECK_KIND(kInvalidArgument, stateful != nullptr, "CheckpointState::add: '", name, "' is null");
  check_name(entries_, name);
  Stateful* raw = stateful.get();
  entries_.push_back(Entry{name, raw, std::move(stateful), false});
  return *this;
}

CheckpointState& CheckpointState::set_step(int64_t step) {
  COHORT_CHECK_KIND(kInvalidArgument, step >= 0, "CheckpointState::set_step: step ", step, " < 0");
  step_ = step;
  return *this;
}
int64_t CheckpointState::step() const { return step_; }

CheckpointState& CheckpointState::check_user_values(UserValuesCheck check) {
  user_check_ = std::move(check);
  return *this;
}
const CheckpointState::UserValuesCheck& CheckpointState::user_values_check() const { return user_check_; }

CheckpointState& CheckpointState::set(const std::string& key, const std::string& value) {
  user_[key] = value;
  return *this;
}
std::string CheckpointState::get(const std::string& key, const std::string& fallback) const {
  const auto it = user_.find(key);
  return it == user_.end() ? fallback : it->second;
}
const std::map<std::string, std::string>& CheckpointState::user_values() const { return user_; }
std::map<std::string, std::string>& CheckpointState::mutable_user_values() { return user_; }

CheckpointState& CheckpointState::rng(bool enabled) {
  rng_ = enabled;
  return *this;
}
bool CheckpointState::rng() const { return rng_; }

const std::vector<CheckpointState::Entry>& CheckpointState::entries() const { return entries_; }

}  // namespace cohort

namespace cohort::detail::ckpt {

std::vector<CheckpointState::Entry> entries_with_rng(const CheckpointState& state) {
  std::vector<CheckpointState::Entry> entries = state.entries();
  if (state.rng()) {
    auto rng = rng_state();
    Stateful* raw = rng.get();
    entries.push_back(CheckpointState::Entry{"rng", raw, std::move(rng), true});
  }
  return entries;
}

std::string without_rank_prefix(const std::string& message) {
  const std::string prefix = rank_prefix();
  return !prefix.empty() && message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

}  // namespace cohort::detail::ckpt
