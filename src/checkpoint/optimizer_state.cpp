// The Stateful adapter of a LibTorch optimizer: each parameter's state tensors ("g0.p3.exp_avg")
// and step counters, and each group's learning rate and size. LibTorch keys the state by the address
// of the parameter's TensorImpl, so parameters are named by their place (group, index) instead, which
// is the same in the process that loads. States an optimizer creates at its first step are created
// in prepare_load() and dropped again when the checkpoint had none (saved before the first step).
// Every parameter has a step count, -1 for "no state yet", and each group its size ("g0.params"), so
// a parameter whose whole state was deleted from a checkpoint is missed, not read as "no state" (hostile
// pass 12, M-4; checkpoints of format version 3 and older record only the parameters with state).
#include <torch/optim/adagrad.h>

#include "checkpoint/entry.h"
#include "checkpoint/format_versioned.h"
#include "cohort/error.h"
#include "compat/optimizer_state.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

class OptimizerState : public Stateful, public FormatVersioned {
 public:
  OptimizerState(std::string name, torch::optim::Optimizer& optimizer)
      : name_(std::move(name)), optimizer_(optimizer) {}

  void set_format_version(int version) override { format_version_ = version; }

  void prepare_load() override {
    for_each_param([&](const std::string&, const torch::Tensor& p, size_t group) {
      if (find_param_state(optimizer_, p) != nullptr) return;
      auto state = fresh_state(optimizer_, optimizer_.param_groups()[group].options(), p);
      if (state) set_param_state(optimizer_, p, std::move(state));
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
      const auto& group = optimizer_.param_groups()[g];
      values["g" + std::to_string(g) + ".lr"] = group.options().get_lr();
      values["g" + std::to_string(g) + ".params"] = static_cast<double>(group.params().size());
    }
    self.for_each_param([&](const std::string& name, const torch::Tensor& p, size_t) {
      auto* state = find_param_state(optimizer_, p);
      const int64_t* step = state ? step_of(*state) : nullptr;
      values[name + ".step"] = state == nullptr ? -1.0 : step ? static_cast<double>(*step) : 0.0;
    });
    return values;
  }

  // A checkpoint that counts its groups' parameters holds this optimizer's groups, each as large;
  // from format version 4 on it must count them (hostile pass 13, S-1: the entry emptied to {}).
  void check_state_values(const StateValues& values, int) const override {
    const std::string entry = "'values." + excerpt(name_) + "'";
    if (!values.count("g0.params")) {
      COHORT_CHECK_KIND(kIO, format_version_ < 4, entry, " has no 'g0.params': from format version 4 on an ",
                        "optimizer's entry counts each group's parameters (damaged or edited)");
      return;
    }
    const auto& groups = optimizer_.param_groups();
    size_t saved_groups = 0;
    while (values.count("g" + std::to_string(saved_groups) + ".params")) ++saved_groups;
    COHORT_CHECK_KIND(kInvalidArgument, saved_groups == groups.size(), entry, " has ", saved_groups,
                      " parameter group(s), this optimizer ", groups.size(),
                      ": the checkpoint is another program's or was edited");
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string key = "g" + std::to_string(g) + ".params";
      const double saved = values.at(key), mine = static_cast<double>(groups[g].params().size());
      COHORT_CHECK_KIND(kInvalidArgument, saved == mine, "'values.", excerpt(name_), ".", key, "' is ",
                        number_text(saved), ", this optimizer's group ", g, " has ", number_text(mine),
                        " parameters: the checkpoint is another program's or was edited");
    }
    // Adagrad makes every parameter's state with the optimizer: -1 ("no state yet") is no run's (hostile
    // pass 13, S-4: a sum deleted and its step set to -1 restarted the accumulator).
    if (!dynamic_cast<const torch::optim::Adagrad*>(&optimizer_)) return;
    for (const auto& [key, value] : values)
      COHORT_CHECK_KIND(kIO, value >= 0 || key.size() < 5 || key.compare(key.size() - 5, 5, ".step") != 0, "'values.",
                        excerpt(name_), ".", excerpt(key), "' is ", number_text(value),
                        " (no state), but Adagrad makes every parameter's state with the optimizer");
  }

  // A parameter saved without state (-1, or absent from an older entry) is left without state, whatever
  // this optimizer held before (hostile pass 13, M-2: state from earlier steps in this process stayed).
  void load_state_values(const StateValues& values) override {
    for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
      const auto lr = values.find("g" + std::to_string(g) + ".lr");
      if (lr != values.end()) optimizer_.param_groups()[g].options().set_lr(lr->second);
    }
    for_each_param([&](const std::string& name, const torch::Tensor& p, size_t) {
      auto* state = find_param_state(optimizer_, p);
      if (state == nullptr) return;
      const auto step = values.find(name + ".step");
      if (step == values.end() || step->second < 0) {
        erase_param_state(optimizer_, p);
        return;
      }
      if (int64_t* mine = step_of(*state)) *mine = static_cast<int64_t>(step->second);
    });
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

  std::string name_;  // the entry's, for messages
  torch::optim::Optimizer& optimizer_;
  int format_version_ = 0;  // the loading checkpoint's
};

}  // namespace

std::shared_ptr<Stateful> optimizer_state(const std::string& name, torch::optim::Optimizer& optimizer) {
  return std::make_shared<OptimizerState>(name, optimizer);
}

}  // namespace cohort::detail::ckpt
