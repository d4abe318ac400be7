// The Stateful adapter of a LibTorch optimizer: each parameter's state tensors ("g0.p3.exp_avg")
// and step counters, and each group's learning rate. LibTorch keys the state by the address of the
// parameter's TensorImpl, so parameters are named by their place (group, index) instead, which is
// the same in the process that loads. States an optimizer creates at its first step are created
// in prepare_load() and dropped again when the checkpoint had none (saved before the first step).
#include <c10/util/string_utils.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <set>

#include "checkpoint/entry.h"
#include "cohort/error.h"

namespace cohort::detail::ckpt {
namespace {

using torch::optim::OptimizerParamState;

std::string key_of(const torch::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}

// The tensors of one parameter's state, by field name; undefined optional fields are left out.
template <typename Visit>
void visit_fields(OptimizerParamState& state, const std::string& where, Visit&& visit) {
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(&state)) {
    visit("exp_avg", s->exp_avg());
    visit("exp_avg_sq", s->exp_avg_sq());
    visit("max_exp_avg_sq", s->max_exp_avg_sq());
  } else if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(&state)) {
    visit("exp_avg", s->exp_avg());
    visit("exp_avg_sq", s->exp_avg_sq());
    visit("max_exp_avg_sq", s->max_exp_avg_sq());
  } else if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(&state)) {
    visit("momentum_buffer", s->momentum_buffer());
  } else if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(&state)) {
    visit("sum", s->sum());
  } else if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(&state)) {
    visit("square_avg", s->square_avg());
    visit("momentum_buffer", s->momentum_buffer());
    visit("grad_avg", s->grad_avg());
  } else {
    throw Error(where + ": checkpoints support the states of SGD, Adam, AdamW, Adagrad and RMSprop");
  }
}

int64_t* step_of(OptimizerParamState& state) {
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(&state)) return &s->step();
  if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(&state)) return &s->step();
  if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(&state)) return &s->step();
  if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(&state)) return &s->step();
  return nullptr;
}

// The state the optimizer's step() would create for `p`, with zeros (or Adagrad's initial value).
std::unique_ptr<OptimizerParamState> fresh_state(torch::optim::Optimizer& optimizer,
                                                 const torch::optim::OptimizerOptions& options,
                                                 const torch::Tensor& p) {
  auto zeros = [&] { return torch::zeros_like(p, torch::MemoryFormat::Preserve); };
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->exp_avg(zeros()).exp_avg_sq(zeros());
    if (static_cast<const torch::optim::AdamOptions&>(options).amsgrad()) s->max_exp_avg_sq(zeros());
    return s;
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(zeros()).exp_avg_sq(zeros());
    if (static_cast<const torch::optim::AdamWOptions&>(options).amsgrad()) s->max_exp_avg_sq(zeros());
    return s;
  }
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    if (static_cast<const torch::optim::SGDOptions&>(options).momentum() == 0) return nullptr;
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(zeros());
    return s;
  }
  if (dynamic_cast<torch::optim::Adagrad*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::AdagradParamState>();
    const auto& o = static_cast<const torch::optim::AdagradOptions&>(options);
    s->sum(torch::full_like(p, o.initial_accumulator_value(), torch::MemoryFormat::Preserve));
    return s;
  }
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::RMSpropParamState>();
    const auto& o = static_cast<const torch::optim::RMSpropOptions&>(options);
    s->square_avg(zeros());
    if (o.momentum() > 0) s->momentum_buffer(zeros());
    if (o.centered()) s->grad_avg(zeros());
    return s;
  }
  throw Error("checkpoints support SGD, Adam, AdamW, Adagrad and RMSprop optimizers");
}

class OptimizerState : public Stateful {
 public:
  explicit OptimizerState(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {}

  void prepare_load() override {
    created_.clear();
    for_each_param([&](const std::string& name, const torch::Tensor& p, size_t group) {
      if (optimizer_.state().count(key_of(p))) return;
      auto state = fresh_state(optimizer_, optimizer_.param_groups()[group].options(), p);
      if (!state) return;
      optimizer_.state()[key_of(p)] = std::move(state);
      created_.insert(name);
    });
  }

  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    for_each_param([&](const std::string& name, const torch::Tensor& p, size_t) {
      const auto it = optimizer_.state().find(key_of(p));
      if (it == optimizer_.state().end()) return;
      visit_fields(*it->second, "optimizer state of " + name, [&](const char* field, const torch::Tensor& t) {
        if (t.defined()) out.push_back({name + "." + field, t});
      });
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
      const auto it = optimizer_.state().find(key_of(p));
      if (it == optimizer_.state().end()) return;
      const int64_t* step = step_of(*it->second);
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
      const auto it = optimizer_.state().find(key_of(p));
      if (it == optimizer_.state().end()) return;
      const auto step = values.find(name + ".step");
      if (step == values.end()) {
        // Saved before this parameter had a state: back to "no state", as when it was saved.
        if (created_.count(name)) optimizer_.state().erase(it);
        return;
      }
      if (int64_t* mine = step_of(*it->second)) *mine = static_cast<int64_t>(step->second);
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
