// A sharding unit's shared state (include/cohort/fsdp.h): the module, its options, and the engine
// that shards it while one does. The registry maps a module to its unit so an engine built later
// finds the units a model marked in its constructor; the engine attaches itself as the unit's owner
// and detaches when it is destroyed, after which a unit is a plain call again.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>

#include "cohort/fsdp.h"

namespace cohort::detail {

/// What a unit calls around its forward (the ZeRO stage 3 engine implements it).
class UnitOwner {
 public:
  virtual ~UnitOwner() = default;
  /// Before the unit's forward: its parameters must be whole when this returns.
  virtual void before_forward(int64_t unit) = 0;
  /// Each output tensor of the unit: returns it with the gather for backward attached.
  virtual torch::Tensor mark_output(int64_t unit, const torch::Tensor& output) = 0;
  /// After the forward (also when it threw): may free the parameters. Must not throw.
  virtual void after_forward(int64_t unit) noexcept = 0;
};

class UnitState {
 public:
  UnitState(std::shared_ptr<torch::nn::Module> module, UnitOptions options)
      : module_(std::move(module)), options_(std::move(options)) {}
  torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const { return module_; }
  const UnitOptions& options() const { return options_; }
  void set_options(UnitOptions options) { options_ = std::move(options); }
  UnitOwner* owner() const { return owner_; }
  int64_t index() const { return index_; }
  /// The engine takes the unit (refused while another engine holds it).
  void attach(UnitOwner* owner, int64_t index);
  void detach(const UnitOwner* owner);

 private:
  std::shared_ptr<torch::nn::Module> module_;
  UnitOptions options_;
  UnitOwner* owner_ = nullptr;
  int64_t index_ = -1;
};

/// The unit `module` was made (null when it is none).
std::shared_ptr<UnitState> find_unit(const torch::nn::Module& module);

}  // namespace cohort::detail
