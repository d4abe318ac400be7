// The Stateful adapter of a LibTorch optimizer: each parameter's state tensors ("g0.p3.exp_avg")
// and step counters, and each group's learning rate. LibTorch keys the state by the address of the
// parameter's TensorImpl, so parameters are named by their place (group, index) instead, which is
// the same in the process that loads. States an optimizer creates at its first step are created
// in prepare_load() and dropped again when the checkpoint had none (saved before the first step).
#include <set>

#include "checkpoint/entry.h"
#include "cohort/error.h"
#include "compat/optimizer_state.h"

namespace cohort::detail::ckpt {
namespace {

class OptimizerState : public Stateful {
 public:
  explicit OptimizerState(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {}

  void prepare_load() override {
    created_.clear();
    for_each_param([&](const std::string& name, const torch::Tensor& p, size_t group) {
      if (find_param_state(optimizer_, p) != nullptr) return;
      auto state = fresh_state(optimizer_, optimizer_.param_groups()[group].options(), p);
      if (!state) return;
      set_param_state(optimizer_, p, std::move(state));
      created_.insert(name);
    });
  }

  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    for_each_param([&](const std::string& name, const torch::Tensor& p, size_t) {
      auto* state = find_param_state(optimizer_, p);
      if (state == nullptr) return;
      for (const auto& [field, t] : state_fields(*state, "optimizer state of " + name))
        if (t.defined()) out.push_back({name + "." + field, t});
    });
    return out;
  }

  StateValues state_values() const override {
    StateValues values;
    auto& self = const_cast<OptimizerState&>(*this);
    for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
      values["g" + std::to_string(g) + ".lr"] = optimizer_.param_groups()[g].options().get_lr();
    }
    self.for_each_param([&](const std::string& name, const torch::Tensor& p, size_t) {
      auto* state = find_param_state(optimizer_, p);
      if (state == nullptr) return;
      const int64_t* step = step_of(*state);
      values[name + ".step"] = step ? static_cast<double>(*step) : 0.0;  // also "has a state"
    });
    return values;
  }

  void load_state_values(const StateValues& values) override {
    for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
      const auto lr = values.find("g" + std::to_string(g) + ".lr");
      if (lr != values.end()) optimizer_.param_groups()[g].options().set_lr(lr->second);
    }
    for_each_param([&](const std::string& name, const torch::Tensor& p, size_t) {
      auto* state = find_param_state(optimizer_, p);
      if (state == nullptr) return;
      const auto step = values.find(name + ".step");
      if (step == values.end()) {
        // Saved before this parameter had a state: back to "no state", as when it was saved.
        if (created_.count(name)) erase_param_state(optimizer_, p);
        return;
      }
      if (int64_t* mine = step_of(*state)) *mine = static_cast<int64_t>(step->second);
    });
    created_.clear();
  }

 private:
  template <typename F>
  void for_each_param(F&& f) {
    auto& groups = optimizer_.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].params().size(); ++i) {
        f("g" + std::to_string(g) + ".p" + std::to_string(i), groups[g].params()[i], g);
      }
    }
  }

  torch::optim::Optimizer& optimizer_;
  std::set<std::string> created_;  // states made by prepare_load()
};

}  // namespace

std::shared_ptr<Stateful> optimizer_state(torch::optim::Optimizer& optimizer) {
  return std::make_shared<OptimizerState>(optimizer);
}

}  // namespace cohort::detail::ckpt
