// The Trainer's view of a strategy: forward, backward of a micro-batch, the optimizer step at the
// accumulation boundary, the state a checkpoint holds and the full parameters. "ddp"/"single" wrap
// cohort::DistributedDataParallel (or nothing) around the module's model (its network, or the module
// itself) and the module's own optimizer; "zero1-3"/"fsdp"/"deepspeed" are the ZeRO engine; "dp" runs
// replicas of the network on threads of this process (strategy_dp.cpp); "pipeline" cuts it into
// stages across ranks (strategy_pipeline.cpp). ddp, dp and pipeline share ModuleOptimizerStrategy.
#pragma once

#include <functional>

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/autocast.h"
#include "cohort/checkpoint.h"
#include "cohort/mesh.h"
#include "cohort/safetensors.h"
#include "cohort/training_module.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "cohort/zero_config.h"
#include "trainer/metrics.h"
#include "trainer/options.h"

namespace cohort::detail {

class Strategy {
 public:
  virtual ~Strategy() = default;
  /// The module's training_step on `batch` (dp: on each replica's chunk of it, the losses combined).
  virtual torch::Tensor training_step(TrainingModule& module, Batch& batch, int64_t index) {
    return module.training_step(batch, index);
  }
  /// The module's validation_step or test_step on `batch`.
  virtual void evaluation_step(TrainingModule& module, Batch& batch, int64_t index, Stage stage) {
    stage == Stage::kValidate ? module.validation_step(batch, index) : module.test_step(batch, index);
  }
  /// How the training and evaluation data are split: (shares, this rank's share). One share per rank,
  /// except under "pipeline", whose ranks of one pipeline read the same batches.
  virtual std::pair<int, int> data_split(const World& world) const { return {world.size(), world.rank()}; }
  /// The ranks a ZeRO engine shards over: the data-parallel ones, or under HSDP one replica's.
  virtual int shard_ranks(const World& world) const { return data_split(world).first; }
  /// The network's output for `input` (float32 when the strategy computes in another dtype).
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  /// `fn` as one forward of the model outside fit (ZeRO stage 3: the units gather as they run; a
  /// collective there). The module's own layers are called by `fn`.
  virtual torch::Tensor run_forward(const std::function<torch::Tensor()>& fn) { return fn(); }
  /// Backward of one micro-batch's loss; `boundary`: the last one of its accumulation window, whose
  /// gradients are reduced over ranks now.
  virtual void backward(const torch::Tensor& loss, bool boundary) = 0;
  /// At the boundary: clip, step the optimizer, zero the gradients.
  virtual void step() = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;
  /// Micro-batches per optimizer step (a ds_config's gradient_accumulation_steps under ZeRO).
  virtual int64_t accumulation() const = 0;
  /// Sets the micro-batches per optimizer step (a resume into another world size keeps the global
  /// batch this way); false when the strategy cannot change it.
  virtual bool set_accumulation(int64_t micro_batches) { return false; }
  virtual double lr() const = 0;
  virtual void add_to(CheckpointState& state) = 0;
  /// TrainerOptions::pretrained_weights into the model as this rank holds it (its shards, its
  /// tensor-parallel parts), at the start of fit.
  virtual void load_pretrained(const std::string& path, const StateDictOptions& options) = 0;
  /// Float32 CPU copies of the parameters by name (a collective under ZeRO stage 3).
  virtual std::vector<std::pair<std::string, torch::Tensor>> full_parameters() = 0;
  /// The same one at a time (ZeRO stage 3: one unit gathered at a time).
  virtual void for_each_full_parameter(const ParameterVisitor& visit) {
    for (const auto& [name, value] : full_parameters()) visit(name, value);
  }
  /// "ddp (2 ranks)", "ZeRO stage 2 (bf16)".
  virtual std::string describe() const = 0;
  /// This rank's model states now (Trainer::memory_report).
  virtual MemoryReport memory_report() const = 0;
  /// What the ZeRO paper's formulas need besides the model: the stage (0: every rank holds all its
  /// model states) and the dtype of the parameters and gradients.
  virtual int zero_stage() const { return 0; }
  virtual c10::ScalarType compute_dtype() const { return torch::kFloat; }
  /// Where ZeRO offloads the optimizer and the parameters (none without ZeRO).
  virtual OffloadDevice offload_optimizer() const { return OffloadDevice::kNone; }
  virtual OffloadDevice offload_params() const { return OffloadDevice::kNone; }
  /// Autocast for training_step / validation_step under bf16-mixed (null otherwise).
  virtual std::unique_ptr<AutocastGuard> autocast() const { return nullptr; }
  /// A value TrainingModule::log gave on one of the strategy's replica threads: kept, to be combined
  /// over the replicas (true); false for any other thread.
  virtual bool log_from_replica(const std::string& name, double value, const LogOptions& options) { return false; }
};

/// What ddp, single, dp and pipeline share: the optimizer configure_optimizers makes over the
/// parameters this rank trains, stepped at the accumulation boundary after clipping by the global
/// gradient norm; accumulate_grad_batches micro-batches per step, each loss divided by it.
class ModuleOptimizerStrategy : public Strategy {
 public:
  void step() override;
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  int64_t accumulation() const override { return options_.raw.accumulate_grad_batches(); }
  bool set_accumulation(int64_t micro_batches) override {
    options_.raw.accumulate_grad_batches(micro_batches);
    return true;
  }
  double lr() const override { return optimizer_->param_groups().at(0).options().get_lr(); }
  MemoryReport memory_report() const override;

 protected:
  explicit ModuleOptimizerStrategy(const ResolvedOptions& options) : options_(options) {}
  /// The module's configure_optimizers over `parameters` (kept for clipping); derived constructors
  /// call it once they know what this rank trains.
  void make_optimizer(TrainingModule& module, std::vector<torch::Tensor> parameters);
  /// One micro-batch's part of the step's loss: loss / accumulate_grad_batches (as it is for 1, so
  /// the graph is a hand-written loop's).
  torch::Tensor per_micro_batch(const torch::Tensor& loss) const;
  /// Scales the gradients so that their global norm is at most max_norm (clip_grad_norm_ over the
  /// parameters; pipeline: the norm over every stage's).
  virtual void clip_gradients(double max_norm);
  /// After each optimizer step (dp: the replicas are stale).
  virtual void after_step() {}

  ResolvedOptions options_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

/// The strategy `options` names for `module` on this world (the module is on world.device()); `mesh`:
/// the (data_parallel, tensor_parallel) mesh when tensor_parallel_size > 1, else null; `replicas`:
/// HSDP's (replicate, shard) mesh over the data-parallel ranks (replica_mesh.h), else null.
std::unique_ptr<Strategy> make_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world,
                                        const std::shared_ptr<Mesh>& mesh, const std::shared_ptr<Mesh>& replicas);
/// zero and deepspeed: sets options.zero from the ds_config or the options (read once; strategy_zero.cpp).
void resolve_zero_config(ResolvedOptions& options, const World& world);
/// Runs the module's configure_model() in the strategy's init context (strategy_zero.cpp).
void configure_model(const ResolvedOptions& options, TrainingModule& module, const World& world,
                     const std::shared_ptr<Mesh>& replicas);

/// "Adam", "SGD", ... (LearningRateMonitor's lr-<name>).
std::string optimizer_name(const torch::optim::Optimizer& optimizer);
/// Trainer::planned_memory: the ZeRO paper's model states per rank for `strategy` over `world`'s ranks,
/// with its offload (what is on file in file_bytes alone, as memory_report() counts it).
MemoryReport planned_memory(Strategy& strategy, const World& world);

/// The trainable parameters of `module`, in order.
std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module);
/// Float32 CPU copies of `module`'s parameters by name.
std::vector<std::pair<std::string, torch::Tensor>> float_parameters(torch::nn::Module& module);

/// The module's model (its network, or the module itself) as the shared_ptr DDP and the ZeRO engine
/// take. The module itself is not owned (the Trainer's caller owns it and outlives the strategy).
std::shared_ptr<torch::nn::Module> model_pointer(TrainingModule& module);

}  // namespace cohort::detail
