// A sharding unit's shared state (include/cohort/fsdp.h): the module, its options, and the engine
// that shards it while one does. The registry maps a module to its unit so an engine built later
// finds the units a model marked in its constructor; the engine attaches itself as the unit's owner
// and detaches when it is destroyed, after which a unit is a plain call again. While a
// UnitSharder is installed (cohort::ShardedInit, src/zero/sharded_init.cpp), every unit made is
// sharded at once and keeps its ConstructionShard until an engine adopts it.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <vector>

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

/// A unit's trainable parameters as sharded when the unit was made (DeepSpeed's zero.Init): they
/// are empty since, and this rank holds its slice of their flat concatenation.
struct ConstructionShard {
  std::vector<torch::Tensor> params;         ///< the unit's own, module order, tied ones once
  std::vector<std::vector<int64_t>> shapes;  ///< their whole shapes
  torch::Tensor shard;                       ///< this rank's slice, padded as partition.h lays out
  int world_size = 1;
  int rank = 0;
  int replicas = 1;  ///< HSDP: the replicas it was made alike on (ShardedInitOptions::replicate_comm)
};

class UnitState;

/// What shards a unit as it is made (installed by cohort::ShardedInit).
class UnitSharder {
 public:
  virtual ~UnitSharder() = default;
  virtual std::shared_ptr<ConstructionShard> shard(const UnitState& unit) = 0;
};

/// Installs `sharder` for units made on this thread from now on (null uninstalls); returns the one
/// installed before.
UnitSharder* install_unit_sharder(UnitSharder* sharder);

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
  /// Set when the unit was sharded as it was made (null otherwise).
  const std::shared_ptr<ConstructionShard>& construction_shard() const { return construction_shard_; }
  void set_construction_shard(std::shared_ptr<ConstructionShard> shard) { construction_shard_ = std::move(shard); }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  UnitOptions options_;
  UnitOwner* owner_ = nullptr;
  int64_t index_ = -1;
  std::shared_ptr<ConstructionShard> construction_shard_;
};

/// The unit `module` was made (null when it is none).
std::shared_ptr<UnitState> find_unit(const torch::nn::Module& module);

}  // namespace cohort::detail
