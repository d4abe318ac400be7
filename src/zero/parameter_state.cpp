// engine_parameter_state (see parameter_state.h).
#include "zero/parameter_state.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <regex>
#include <utility>

#include "core/check.h"

namespace cohort::detail {
namespace {

// Elements [offset, offset + tensor.numel()) of a tensor of `shape`, flattened.
StateTensor slice_of(std::string name, torch::Tensor tensor, const std::vector<int64_t>& shape, int64_t offset) {
  StateTensor out{std::move(name), std::move(tensor), StateKind::kSharded};
  out.flat_numel = c10::multiply_integers(shape);
  out.offset = offset;
  out.whole_shape = shape;
  return out;
}

// Share `share` of `shares` of n elements, as torch.chunk cuts them.
std::pair<int64_t, int64_t> share_of(int64_t n, int shares, int share) {
  const int64_t size = (n + shares - 1) / shares, first = std::min(n, size * share);
  return {first, std::min(size, n - first)};
}

bool is_group_step(const std::string& key) {
  static const std::regex pattern("zero\\.group[0-9]+\\.step");
  return std::regex_match(key, pattern);
}

class EngineParameterState : public Stateful {
 public:
  EngineParameterState(ZeroEngineCore& engine, ParameterStateOptions options)
      : engine_(engine), options_(std::move(options)) {}

  void prepare_load() override {
    engine_.prepare_load();
    loading_ = true;
  }

  // Saving: the elements each rank keeps, a cut parameter's from its whole tensor. Loading: where the
  // checkpoint writes them (a cut parameter's runs into a holder, copied by load_state_values).
  std::vector<StateTensor> state_tensors() override {
    const bool loading = loading_;
    loading_ = false;  // the next call is a save's (also when this load fails)
    std::vector<StateTensor> out = loading ? to_load() : to_save();
    for (StateTensor& t : engine_.state_tensors())
      if (t.name.rfind(kModule, 0) == 0) out.push_back(module_tensor(std::move(t), loading));
    return out;
  }

  // The engine's numbers without its groups' step counts: a group's optimizer steps are the engine's
  // steps taken (cohort-ckpt verify holds every saved group to it), and the groups differ between runs.
  StateValues state_values() const override {
    StateValues values = engine_.state_values();
    for (auto it = values.begin(); it != values.end();) it = is_group_step(it->first) ? values.erase(it) : ++it;
    return values;
  }
  void check_state_values(const StateValues& values, int saved_world_size) const override {
    engine_.check_state_values(with_group_steps(values), saved_world_size);
  }
  void load_state_values(const StateValues& values) override {
    torch::NoGradGuard no_grad;
    for (const Pending& p : pending_) {
      if (p.runs.empty()) {
        p.live.copy_(part(p.name)->cut(p.holder));  // a module tensor whole
        continue;
      }
      for (const PartRun& run : p.runs)
        p.live.narrow(0, run.local - p.begin, run.count).copy_(p.holder.narrow(0, run.whole - p.first, run.count));
    }
    pending_.clear();
    engine_.load_state_values(with_group_steps(values));
  }
  bool tensors_optional() const override { return engine_.tensors_optional(); }

 private:
  static constexpr const char* kModule = "module.";

  struct Pending {
    std::string name;  // the parameter's or module tensor's name
    torch::Tensor live, holder;
    std::vector<PartRun> runs;  // a parameter's elements in `holder` and `live`; none: a module tensor
    int64_t begin = 0;          // the parameter's element at live[0]
    int64_t first = 0;          // the whole tensor's element at holder[0]
  };

  StateValues with_group_steps(StateValues values) const {
    auto value = [&](const char* key) {
      const auto it = values.find(key);
      return it == values.end() ? 0.0 : it->second;
    };
    const double taken = value("zero.global_steps") - value("zero.skipped_steps");
    for (const auto& item : engine_.state_values())
      if (is_group_step(item.first)) values[item.first] = taken;
    return values;
  }

  // A parameter state's name in the checkpoint: "<parameter>.<field>", the parameter under its saved name.
  std::string saved_name(const std::string& parameter, const std::string& field) const {
    return (options_.name_of ? options_.name_of(parameter) : parameter) + "." + field;
  }

  // A part, kept by name: the cached value outlives each call's use.
  const ParameterPart* part(const std::string& name) {
    if (!options_.part_of) return nullptr;
    auto found = parts_.find(name);
    if (found == parts_.end()) found = parts_.emplace(name, options_.part_of(name)).first;
    return found->second ? &*found->second : nullptr;
  }

  std::vector<StateTensor> to_save() {
    std::vector<StateTensor> out;
    bool any_cut = false;
    for (const ParameterState& p : engine_.parameter_states()) {
      if (part(p.name) != nullptr) any_cut = true;
      if (part(p.name) != nullptr || p.begin == p.end) continue;
      for (const auto& [field, t] : p.fields) out.push_back(slice_of(saved_name(p.name, field), t, p.shape, p.begin));
    }
    if (any_cut) engine_.for_each_whole_parameter_state([&](const ParameterState& p) { save_whole(p, out); });
    return out;
  }

  // A part's whole state, gathered over the holders of the parts (every rank, in the module's order);
  // each rank of the holders x shard grid writes one share (replicas the same one: written once).
  void save_whole(const ParameterState& p, std::vector<StateTensor>& out) {
    const ParameterPart* c = part(p.name);
    if (c == nullptr) return;
    const std::vector<int64_t> shape = c->whole_shape(p.shape);
    const auto [shard_rank, shards] = engine_.shard_position();
    const int share = c->holder * shards + shard_rank, shares = c->holders * shards;
    for (const auto& [field, local] : p.fields) {
      const torch::Tensor whole = c->gather(local.view(p.shape)).flatten();
      const auto [first, count] = share_of(whole.numel(), shares, share);
      if (count > 0)
        out.push_back(slice_of(saved_name(p.name, field), whole.narrow(0, first, count).clone(), shape, first));
    }
  }

  std::vector<StateTensor> to_load() {
    pending_.clear();
    std::vector<StateTensor> out;
    for (const ParameterState& p : engine_.parameter_states()) {
      if (p.begin == p.end) continue;
      const ParameterPart* c = part(p.name);
      if (c == nullptr) {
        for (const auto& [field, t] : p.fields) out.push_back(slice_of(saved_name(p.name, field), t, p.shape, p.begin));
        continue;
      }
      const std::vector<int64_t> shape = c->whole_shape(p.shape);
      const auto runs = c->runs(shape, p.begin, p.end);
      COHORT_CHECK_KIND(kInternal, !runs.empty(), "ZeRO engine state: no runs of parameter '", p.name, "'");
      const int64_t first = runs.front().whole, span = runs.back().whole + runs.back().count - first;
      for (const auto& [field, t] : p.fields) {
        torch::Tensor holder = torch::empty({span}, t.options());
        out.push_back(slice_of(saved_name(p.name, field), holder, shape, first));
        pending_.push_back({p.name, t, holder, runs, p.begin, first});
      }
    }
    return out;
  }

  // The engine's whole tensors (frozen parameters, buffers), of options_.module_kind; a part saved whole.
  StateTensor module_tensor(StateTensor t, bool loading) {
    t.kind = options_.module_kind;
    const std::string name = t.name.substr(std::string(kModule).size());
    if (options_.name_of) t.name = kModule + options_.name_of(name);
    const ParameterPart* c = part(name);
    if (c == nullptr) return t;
    if (!loading) {
      t.tensor = c->gather(t.tensor);
      return t;
    }
    Pending p;
    p.name = name;
    p.live = t.tensor;
    p.holder = torch::empty(c->whole_shape(t.tensor.sizes().vec()), t.tensor.options());
    t.tensor = p.holder;
    pending_.push_back(std::move(p));
    return t;
  }

  ZeroEngineCore& engine_;
  ParameterStateOptions options_;
  std::map<std::string, std::optional<ParameterPart>> parts_;
  std::vector<Pending> pending_;
  bool loading_ = false;
};

// Several engines' states as one (a pipeline's stages on this rank): they step together, so their
// numbers are the same; the first's are saved and every engine loads them.
class EnginesState : public Stateful {
 public:
  explicit EnginesState(std::vector<std::shared_ptr<Stateful>> engines) : engines_(std::move(engines)) {
    COHORT_CHECK_KIND(kInvalidArgument, !engines_.empty(), "ZeRO engine state: no engines");
  }
  void prepare_load() override {
    for (auto& engine : engines_) engine->prepare_load();
  }
  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    for (auto& engine : engines_)
      for (StateTensor& t : engine->state_tensors()) out.push_back(std::move(t));
    return out;
  }
  StateValues state_values() const override { return engines_.front()->state_values(); }
  void check_state_values(const StateValues& values, int saved_world_size) const override {
    for (const auto& engine : engines_) engine->check_state_values(values, saved_world_size);
  }
  void load_state_values(const StateValues& values) override {
    for (auto& engine : engines_) engine->load_state_values(values);
  }
  bool tensors_optional() const override { return engines_.front()->tensors_optional(); }

 private:
  std::vector<std::shared_ptr<Stateful>> engines_;
};

}  // namespace

std::shared_ptr<Stateful> engines_parameter_state(const std::vector<ZeroEngineCore*>& engines,
                                                  const ParameterStateOptions& options) {
  std::vector<std::shared_ptr<Stateful>> states;
  for (ZeroEngineCore* engine : engines) states.push_back(engine_parameter_state(*engine, options));
  return std::make_shared<EnginesState>(std::move(states));
}

std::shared_ptr<Stateful> engine_parameter_state(ZeroEngineCore& engine, ParameterStateOptions options) {
  return std::make_shared<EngineParameterState>(engine, std::move(options));
}

}  // namespace cohort::detail
