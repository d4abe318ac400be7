// engine_parameter_state (see engine_parameter_state.h).
#include "trainer/engine_parameter_state.h"

#include <torch/torch.h>

#include <regex>
#include <utility>
#include <vector>

#include "cohort/dtensor.h"
#include "core/check.h"
#include "tp/cut_runs.h"

namespace cohort::detail {
namespace {

using tp::detail::CutRun;
using tp::detail::ParameterCut;
using CutOf = std::function<const ParameterCut*(const std::string&)>;

// Elements [offset, offset + tensor.numel()) of a tensor of `shape`, flattened.
StateTensor slice_of(std::string name, torch::Tensor tensor, const std::vector<int64_t>& shape, int64_t offset) {
  StateTensor out{std::move(name), std::move(tensor), StateKind::kSharded};
  out.flat_numel = c10::multiply_integers(shape);
  out.offset = offset;
  out.whole_shape = shape;
  return out;
}

bool is_group_step(const std::string& key) {
  static const std::regex pattern("zero\\.group[0-9]+\\.step");
  return std::regex_match(key, pattern);
}

class EngineParameterState : public Stateful {
 public:
  EngineParameterState(ZeroEngineCore& engine, CutOf cut_of) : engine_(engine), cut_of_(std::move(cut_of)) {}

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
      if (t.name.rfind("module.", 0) == 0) out.push_back(module_tensor(std::move(t), loading));
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
      if (p.module_cut != nullptr) {
        p.live.copy_(tp::detail::cut_of(p.holder, *p.module_cut));
        continue;
      }
      for (const CutRun& run : p.runs)
        p.live.narrow(0, run.local - p.begin, run.count).copy_(p.holder.narrow(0, run.whole - p.first, run.count));
    }
    pending_.clear();
    engine_.load_state_values(with_group_steps(values));
  }
  bool tensors_optional() const override { return engine_.tensors_optional(); }

 private:
  struct Pending {
    torch::Tensor live, holder;
    std::vector<CutRun> runs;                  // a parameter's elements in `holder` and `live`
    int64_t begin = 0;                         // the parameter's element at live[0]
    int64_t first = 0;                         // the whole tensor's element at holder[0]
    const ParameterCut* module_cut = nullptr;  // else: `holder` is a module tensor whole, cut into `live`
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

  const ParameterCut* cut(const std::string& name) const { return cut_of_ ? cut_of_(name) : nullptr; }

  std::vector<StateTensor> to_save() {
    std::vector<StateTensor> out;
    bool any_cut = false;
    for (const ParameterState& p : engine_.parameter_states()) {
      if (cut(p.name) != nullptr) any_cut = true;
      if (cut(p.name) != nullptr || p.begin == p.end) continue;
      for (const auto& [field, t] : p.fields) out.push_back(slice_of(p.name + "." + field, t, p.shape, p.begin));
    }
    if (any_cut) engine_.for_each_whole_parameter_state([&](const ParameterState& p) { save_whole(p, out); });
    return out;
  }

  // A cut parameter's whole state, gathered over its tensor-parallel group (every rank, in the module's
  // order); each rank of the tp x shard grid writes one share (replicas the same one: written once).
  void save_whole(const ParameterState& p, std::vector<StateTensor>& out) {
    const ParameterCut* c = cut(p.name);
    if (c == nullptr) return;
    std::vector<int64_t> shape = p.shape;
    shape[size_t(c->dim)] = c->whole;
    const auto [shard_rank, shards] = engine_.shard_position();
    const int share = c->comm->rank() * shards + shard_rank, shares = c->comm->size() * shards;
    for (const auto& [field, local] : p.fields) {
      const torch::Tensor whole = tp::detail::gather_cut(local.view(p.shape), *c).flatten();
      const auto [first, count] = shard_range(whole.numel(), shares, share);
      if (count > 0) out.push_back(slice_of(p.name + "." + field, whole.narrow(0, first, count).clone(), shape, first));
    }
  }

  std::vector<StateTensor> to_load() {
    pending_.clear();
    std::vector<StateTensor> out;
    for (const ParameterState& p : engine_.parameter_states()) {
      if (p.begin == p.end) continue;
      const ParameterCut* c = cut(p.name);
      if (c == nullptr) {
        for (const auto& [field, t] : p.fields) out.push_back(slice_of(p.name + "." + field, t, p.shape, p.begin));
        continue;
      }
      std::vector<int64_t> shape = p.shape;
      shape[size_t(c->dim)] = c->whole;
      auto runs = tp::detail::cut_runs(shape, c->dim, c->fused, c->comm->size(), c->comm->rank(), p.begin, p.end);
      const int64_t first = runs.front().whole, span = runs.back().whole + runs.back().count - first;
      for (const auto& [field, t] : p.fields) {
        torch::Tensor holder = torch::empty({span}, t.options());
        out.push_back(slice_of(p.name + "." + field, holder, shape, first));
        pending_.push_back({t, holder, runs, p.begin, first});
      }
    }
    return out;
  }

  // The engine's whole tensors (frozen parameters, buffers): replicated, a cut one saved whole.
  StateTensor module_tensor(StateTensor t, bool loading) {
    const ParameterCut* c = cut(t.name.substr(std::string("module.").size()));
    if (c == nullptr) return t;
    if (!loading) {
      t.tensor = tp::detail::gather_cut(t.tensor, *c);
      return t;
    }
    std::vector<int64_t> shape = t.tensor.sizes().vec();
    shape[size_t(c->dim)] = c->whole;
    Pending p;
    p.live = t.tensor;
    p.holder = torch::empty(shape, t.tensor.options());
    p.module_cut = c;
    t.tensor = p.holder;
    pending_.push_back(std::move(p));
    return t;
  }

  ZeroEngineCore& engine_;
  CutOf cut_of_;
  std::vector<Pending> pending_;
  bool loading_ = false;
};

}  // namespace

std::shared_ptr<Stateful> engine_parameter_state(ZeroEngineCore& engine, CutOf cut_of) {
  return std::make_shared<EngineParameterState>(engine, std::move(cut_of));
}

}  // namespace cohort::detail
