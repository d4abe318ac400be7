// Sharding units: FSDP2's fully_shard for LibTorch modules of any shape. A unit is a submodule whose
// parameters the ZeRO stage 3 engine keeps as a 1/N flat shard per rank, gathers just before the unit
// runs (prefetching the next unit's), frees after its forward and gathers again for its backward, and
// whose gradients are reduce-scattered as soon as its backward ends. LibTorch has no forward hooks,
// so the call must pass through the unit: mark a block in its parent's constructor and call the
// handle. Without a stage 3 engine a unit is a plain call (plus activation checkpointing if asked).
// See docs/fsdp.md.
//
//   struct GPTImpl : torch::nn::Module {
//     GPTImpl() { for (int i = 0; i < 12; ++i)
//                   blocks.push_back(cohort::fully_shard(register_module("h" + std::to_string(i), Block()))); }
//     torch::Tensor forward(torch::Tensor x) { for (auto& block : blocks) x = block(x); return x; }
//     std::vector<cohort::Unit<BlockImpl>> blocks;
//   };
//
// For a model whose code you cannot change, EngineOptions::unit_policy makes units of modules that a
// torch::nn::Sequential calls (the engine routes the Sequential's call through the unit).
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cohort/activation_checkpoint.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

struct UnitOptions {
  /// Free the gathered parameters after the unit's forward and gather them again for its backward
  /// (FSDP2's reshard_after_forward). false keeps them from forward until the unit's backward: less
  /// communication, more memory.
  TORCH_ARG(bool, reshard_after_forward) = true;
  /// Keep none of the unit's activations: backward recomputes its forward (cohort::checkpoint).
  TORCH_ARG(bool, activation_checkpointing) = false;
};

namespace detail {

class UnitState;  // src/core/units.cpp: the module, its options and the engine sharding it (if any)

/// Makes `module` a unit. Marking the same module twice is refused.
std::shared_ptr<UnitState> register_unit(std::shared_ptr<torch::nn::Module> module, UnitOptions options);
const UnitOptions& unit_options(const UnitState& state);
void set_unit_options(UnitState& state, UnitOptions options);

/// One call of a unit: the engine gathers in the constructor and frees in the destructor.
class UnitCall {
 public:
  explicit UnitCall(UnitState& state);
  ~UnitCall();
  UnitCall(const UnitCall&) = delete;
  UnitCall& operator=(const UnitCall&) = delete;
  /// An output of the unit: the engine gathers the parameters again before backward reaches it.
  torch::Tensor output(const torch::Tensor& t);
  bool checkpointed() const;

 private:
  UnitState& state_;
  bool engine_call_ = false;
};

template <typename T>
struct UnitOutput {
  static T mark(UnitCall&, T&& value) {
    static_assert(sizeof(T) == 0,
                  "cohort::Unit: a unit's forward must return torch::Tensor, std::vector<torch::Tensor>, "
                  "or a std::tuple / std::pair of torch::Tensor (its outputs carry the gather for backward)");
    return std::move(value);
  }
};
template <>
struct UnitOutput<torch::Tensor> {
  static torch::Tensor mark(UnitCall& call, torch::Tensor&& t) { return call.output(t); }
};
template <>
struct UnitOutput<std::vector<torch::Tensor>> {
  static std::vector<torch::Tensor> mark(UnitCall& call, std::vector<torch::Tensor>&& v) {
    for (auto& t : v) t = call.output(t);
    return std::move(v);
  }
};
template <typename... Ts>
struct UnitOutput<std::tuple<Ts...>> {
  static std::tuple<Ts...> mark(UnitCall& call, std::tuple<Ts...>&& t) {
    std::apply([&](auto&... x) { ((x = call.output(x)), ...); }, t);
    return std::move(t);
  }
};
template <typename A, typename B>
struct UnitOutput<std::pair<A, B>> {
  static std::pair<A, B> mark(UnitCall& call, std::pair<A, B>&& p) {
    p.first = call.output(p.first);
    p.second = call.output(p.second);
    return std::move(p);
  }
};

}  // namespace detail

/// A handle on a sharding unit: call it like the module (unit(x, mask)); unit->member reaches the
/// module. Copies share the unit.
template <typename M>
class Unit {
 public:
  Unit() = default;
  explicit Unit(std::shared_ptr<M> module, UnitOptions options = {})
      : module_(std::move(module)), state_(detail::register_unit(module_, std::move(options))) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    detail::UnitCall call(*state_);
    using Result = std::decay_t<decltype(module_->forward(std::forward<Args>(args)...))>;
    if (call.checkpointed()) {
      M* module = module_.get();
      Result out = checkpoint([module](auto&&... a) { return module->forward(a...); }, std::forward<Args>(args)...);
      return detail::UnitOutput<Result>::mark(call, std::move(out));
    }
    Result out = module_->forward(std::forward<Args>(args)...);
    return detail::UnitOutput<Result>::mark(call, std::move(out));
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  M* operator->() const { return module_.get(); }
  M& operator*() const { return *module_; }
  const std::shared_ptr<M>& ptr() const { return module_; }
  bool is_empty() const { return module_ == nullptr; }
  const UnitOptions& options() const { return detail::unit_options(*state_); }
  /// Changes the unit's options (before the engine is built, or between steps).
  void set_options(UnitOptions options) { detail::set_unit_options(*state_, std::move(options)); }

 private:
  std::shared_ptr<M> module_;
  std::shared_ptr<detail::UnitState> state_;
};

/// Makes `module` (usually just registered in its parent's constructor) a sharding unit.
template <typename M>
Unit<M> fully_shard(std::shared_ptr<M> module, UnitOptions options = {}) {
  return Unit<M>(std::move(module), std::move(options));
}
template <typename Impl>
Unit<Impl> fully_shard(const torch::nn::ModuleHolder<Impl>& module, UnitOptions options = {}) {
  return Unit<Impl>(module.ptr(), std::move(options));
}

/// Which modules of an unchanged model become units (Lightning's auto_wrap_policy): called with each
/// module a torch::nn::Sequential calls (name as in named_modules(), the module). Only such modules
/// can be units without changing the model's code: the engine routes the Sequential's call.
using UnitPolicy = std::function<bool(const std::string& name, const torch::nn::Module& module)>;

/// Every module a Sequential calls that holds parameters (ResNet's blocks, a Sequential model's layers).
UnitPolicy sequential_children();

/// Modules of type Impl (e.g. units_of_type<BasicBlockImpl>()).
template <typename Impl>
UnitPolicy units_of_type() {
  return [](const std::string&, const torch::nn::Module& m) { return dynamic_cast<const Impl*>(&m) != nullptr; };
}

}  // namespace cohort
COHORT_EXPORT_END
