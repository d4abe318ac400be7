// cohort::TrainingModule: Lightning's LightningModule for C++. A module says what one step computes
// (training_step returns the loss), how it is evaluated (validation_step, test_step, logging metrics
// with log()), and which optimizer updates it (configure_optimizers); the Trainer owns the loop, the
// strategy, the data and the checkpoints. See docs/trainer.md.
//
//   struct Classifier : cohort::TrainingModule {
//     Classifier() : TrainingModule(make_network()) {}
//     torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
//       auto loss = torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
//       log("train_loss", loss, cohort::LogOptions().prog_bar(true));
//       return loss;
//     }
//     std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> p) override {
//       return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
//     }
//   };
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/data_loader.h"
#include "cohort/export.h"
#include "cohort/fsdp.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// How a logged value is shown and aggregated (Lightning's self.log arguments).
struct LogOptions {
  /// Show it in the progress bar.
  TORCH_ARG(bool, prog_bar) = false;
  /// Reduce it over ranks: the epoch value is the exact sample-weighted mean over every rank's
  /// batches; a step value is the mean over ranks.
  TORCH_ARG(bool, sync_dist) = false;
  /// Record the value of each step / the mean over the epoch. Unset: Lightning's defaults (step
  /// values in training_step, epoch values in validation_step and test_step).
  TORCH_ARG(std::optional<bool>, on_step) = std::nullopt;
  TORCH_ARG(std::optional<bool>, on_epoch) = std::nullopt;
  /// Send it to the loggers (metrics.csv, TensorBoard).
  TORCH_ARG(bool, logger) = true;
};

/// When the LR scheduler steps: after each epoch (Lightning's default) or each optimizer step.
enum class SchedulerInterval { kEpoch, kStep };

/// What configure_lr_scheduler returns: a LibTorch scheduler on the optimizer it was given.
struct SchedulerSetup {
  std::shared_ptr<torch::optim::LRScheduler> scheduler;
  SchedulerInterval interval = SchedulerInterval::kEpoch;
  int64_t frequency = 1;
};

class Mesh;

namespace detail {
/// What a TrainingModule reaches of the Trainer that runs it (implemented in src/trainer).
class ModuleLink {
 public:
  virtual ~ModuleLink() = default;
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  virtual void log(const std::string& name, const torch::Tensor& value, const LogOptions& options) = 0;
  virtual int64_t current_epoch() const = 0;
  virtual int64_t global_step() const = 0;
  /// The module is being destroyed: the Trainer lets go of it (and of the strategy built on it).
  virtual void detach_module() = 0;
  /// The Trainer's mesh (TrainerOptions.tensor_parallel_size > 1), or none.
  virtual const Mesh* device_mesh() const { return nullptr; }
  /// Strategy "pipeline": forward() runs the stages of the module's pipeline_layers().
  virtual bool runs_pipeline_layers() const { return false; }
};
}  // namespace detail

class TrainingModule : public torch::nn::Module {
 public:
  /// A module with its own layers (Lightning's shape): the derived class registers them in its
  /// constructor (register_module; blocks to shard marked with cohort::fully_shard) and defines a
  /// forward of any signature that its training_step, validation_step and test_step call. The
  /// strategies train the module itself: ddp and single as it is; zero1-3 and fsdp through the ZeRO
  /// engine, each step being one forward of the model (engine.run_forward), with the batch's
  /// floating-point data cast to the compute precision first (its output then comes in that dtype).
  /// Strategies dp and pipeline need a Sequential network (they copy it or cut it into stages).
  TrainingModule();
  /// `network` is what forward() runs: as is under ddp/dp/single, through the ZeRO engine under
  /// zero1-3/fsdp (cast to the compute precision; at stage 3 unit by unit, gathering each unit's
  /// parameters in time). It is registered as the submodule "network".
  explicit TrainingModule(torch::nn::Sequential network);
  /// Tells a Trainer still holding the module to let go of it (its strategy refers to the module).
  ~TrainingModule() override;

  /// One training batch: returns the loss the Trainer runs backward on.
  virtual torch::Tensor training_step(Batch& batch, int64_t batch_index) = 0;
  /// Strategy "pipeline" only: the loss of the last stage's `output` on one microbatch and its
  /// `target`, a mean over the microbatch (e.g. cross_entropy). Under "pipeline" the Trainer runs the
  /// step itself (every stage's forward, this loss, backward) and training_step is not called.
  virtual torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target);
  virtual void validation_step(Batch& batch, int64_t batch_index) {}
  virtual void test_step(Batch& batch, int64_t batch_index) {}
  /// The optimizer over `parameters`: the network's trainable parameters (ddp, dp, single) or this
  /// rank's fp32 shards of them (zero1-3; not called when a ds_config names an optimizer).
  virtual std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) = 0;
  /// An optional LR scheduler on the optimizer configure_optimizers returned.
  virtual SchedulerSetup configure_lr_scheduler(torch::optim::Optimizer& optimizer) { return {}; }
  /// Strategy fsdp / zero3: which modules become sharding units besides those the module marked with
  /// cohort::fully_shard (Lightning's auto_wrap_policy), e.g. cohort::units_of_type<BlockImpl>() or
  /// cohort::sequential_children(); only modules a torch::nn::Sequential calls can be reached (see
  /// cohort/fsdp.h). Their options: TrainerOptions reshard_after_forward / activation_checkpointing.
  /// Null (the default): a network without marked units is sharded entry by entry; otherwise the
  /// marked units are, and the rest of the parameters form the root unit.
  virtual UnitPolicy shard_units() { return nullptr; }
  /// Strategy "pipeline" for a module with its own layers: its layers in the order they run, which the
  /// strategy cuts into stages (called once, after configure_model).
  struct PipelineLayers {
    /// Entries sharing the module's parameters (models/gpt_pipeline.h's gpt_pipeline_layers).
    torch::nn::Sequential layers{nullptr};
    /// Each of their parameters' name in the module ("4.transformer.h.2.ln_1.weight" ->
    /// "gpt.transformer.h.2.ln_1.weight"): checkpoints and full parameters use the module's names, so
    /// they load under any strategy. Two entries' parameters of one name are one weight, tied across
    /// stages (cohort::pipeline::PipelineOptions::parameter_names).
    std::function<std::string(const std::string& layer_name)> names;
  };
  /// The default: none (strategy "pipeline" then refuses the module).
  virtual PipelineLayers pipeline_layers() { return {}; }
  /// Lightning's configure_model: makes layers once, when the Trainer takes the module, before the
  /// strategy sees it. Under fsdp / zero3 it runs inside a cohort::ShardedInit, so the units it marks
  /// with cohort::fully_shard are sharded as they are made (a model too large for one rank).
  virtual void configure_model() {}

  // Hooks, called on every rank in Lightning's order.
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_train_batch_end(const torch::Tensor& loss, int64_t batch_index) {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_end() {}

  /// Records a metric of the current step or epoch (a scalar tensor or number); see LogOptions.
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options = {});
  void log(const std::string& name, double value, const LogOptions& options = {});

  /// Runs the network under the Trainer's strategy (or directly, outside a Trainer). A module with its
  /// own layers overrides it, or defines a forward of another signature (the Trainer never calls it);
  /// under strategy "pipeline" this one runs its pipeline_layers() stage by stage (evaluation steps).
  virtual torch::Tensor forward(const torch::Tensor& input);
  /// Whether the module was made with a network (TrainingModule(network)), not with its own layers.
  bool has_network() const { return !network_.is_empty(); }
  /// The network given to the constructor (a cohort::Error for a module with its own layers).
  torch::nn::Sequential& network();
  /// What the strategies train: the network, or the module itself when it has its own layers.
  torch::nn::Module& model();
  /// The Trainer's mesh of ranks (Lightning's device_mesh), from configure_model on, when
  /// TrainerOptions.tensor_parallel_size is above 1: axes "data_parallel" and "tensor_parallel". A
  /// cohort::Error otherwise.
  const Mesh& device_mesh() const;
  /// Epochs finished / optimizer steps taken so far (0 outside a Trainer).
  int64_t current_epoch() const;
  int64_t global_step() const;

  /// For the Trainer: where forward() and log() go while it runs this module (null: nowhere).
  void attach(detail::ModuleLink* link) { link_ = link; }

 private:
  torch::nn::Sequential network_{nullptr};
  detail::ModuleLink* link_ = nullptr;
};

}  // namespace cohort
COHORT_EXPORT_END
