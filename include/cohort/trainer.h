// cohort::Trainer: PyTorch Lightning's Trainer for C++. It owns the loop (epochs, accumulation,
// clipping, validation, LR scheduling), the strategy (ddp, zero1-3, fsdp, deepspeed with a ds_config,
// dp, pipeline, single), the data sharding, metrics, callbacks, loggers and checkpoints; started as a
// plain program with devices > 1 it launches the other local workers itself. See docs/trainer.md.
//
//   cohort::Trainer trainer(cohort::TrainerOptions().devices(2).strategy("ddp").max_epochs(2));
//   trainer.fit(module, train_loader, cohort::FitOptions().val(&val_loader));
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/data_loader.h"
#include "cohort/data_module.h"
#include "cohort/export.h"
#include "cohort/trainer_callbacks.h"
#include "cohort/trainer_loggers.h"
#include "cohort/trainer_options.h"
#include "cohort/training_module.h"
#include "cohort/world.h"
#include "cohort/zero.h"

COHORT_EXPORT_BEGIN
namespace cohort {

struct FitOptions {
  using LoaderPointer = DataLoader*;  // TORCH_ARG spells `const T&`, which needs a type name here
  /// Validation data (run every val_check_interval / check_val_every_n_epoch); null: none.
  TORCH_ARG(LoaderPointer, val) = nullptr;
  /// Resume from "last" (the newest checkpoint of the ModelCheckpoint callback, if there is one) or a
  /// checkpoint directory (which must exist); "": start from scratch.
  TORCH_ARG(std::string, ckpt_path) = "";
  /// When the launcher restarted the job (TORCHELASTIC_RESTART_COUNT > 0, as cohortrun and torchrun
  /// set it) and a ModelCheckpoint callback saves checkpoints, resume from the newest one this job saved
  /// (known by a token its first attempt writes to the directory's `.job`), so a restarted group
  /// continues instead of going back to ckpt_path or to scratch; while it saved none, from ckpt_path.
  TORCH_ARG(bool, resume_on_restart) = true;
};

namespace detail {
class TrainerImpl;
}

class Trainer {
 public:
  /// Checks every option (one-line cohort::Error naming option, value and accepted values), starts
  /// the other local workers when needed, and joins the world (cohort::init()).
  explicit Trainer(TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  Trainer& add_callback(std::shared_ptr<Callback> callback);
  Trainer& add_logger(std::shared_ptr<Logger> logger);

  void fit(TrainingModule& module, DataLoader& train, const FitOptions& options = {});
  /// fit with the DataModule's loaders (prepare_data, setup("fit"), train_dataloader, val_dataloader);
  /// options.val must then be null.
  void fit(TrainingModule& module, DataModule& data, const FitOptions& options = {});
  /// One pass over `data` with validation_step / test_step; returns the epoch metrics.
  std::map<std::string, double> validate(TrainingModule& module, DataLoader& data);
  std::map<std::string, double> test(TrainingModule& module, DataLoader& data);
  /// The same over the DataModule's val_dataloader / test_dataloader (after prepare_data and setup).
  std::map<std::string, double> validate(TrainingModule& module, DataModule& data);
  std::map<std::string, double> test(TrainingModule& module, DataModule& data);

  const World& world() const;
  const TrainerOptions& options() const;
  /// The strategy and precision in words: "ddp (2 ranks), 32-true".
  std::string describe() const;
  int64_t current_epoch() const;
  int64_t global_step() const;
  /// The last value of every logged metric (step values and epoch means), as callbacks see them.
  const std::map<std::string, double>& callback_metrics() const;
  /// Those logged with prog_bar(true).
  std::map<std::string, double> progress_bar_metrics() const;
  /// Training batches this rank runs per epoch (after limit_train_batches / fast_dev_run), and samples
  /// all ranks consumed so far in this epoch.
  int64_t num_training_batches() const;
  int64_t samples_in_epoch() const;
  /// Batches of this epoch trained before now (by an earlier run, when resumed mid-epoch).
  int64_t batches_done_in_epoch() const;
  /// Asks the loop to stop after this step (EarlyStopping); every rank's wish counts.
  void request_stop(const std::string& reason);
  bool should_stop() const;
  /// The learning rate of the optimizer's first group now, and the optimizer's name ("Adam").
  double lr() const;
  /// The optimizer configure_optimizers made (under ZeRO: the engine's, over this rank's shards).
  torch::optim::Optimizer& optimizer();
  std::string optimizer_name() const;
  /// Saves the whole training state as <dir>/step-<global_step> (a collective: every rank calls it),
  /// keeping the newest keep_last (0: all). Returns the step directory. `async`: SaveOptions::async
  /// (written in the background once the state is copied; the directory appears when it is written).
  std::string save_checkpoint(const std::string& dir, int keep_last = 2, bool async = false);
  /// The full parameters in float32 by name (gathers ZeRO shards: every rank calls it).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters();
  /// The same one parameter at a time, in the module's order: under ZeRO stage 3 one unit is gathered
  /// at a time, so no rank holds the whole model (every rank calls it).
  void for_each_full_parameter(const ParameterVisitor& visit);
  /// Runs `fn`, which calls the fitted module's layers, as one forward of the model outside fit, under no_grad (e.g.
  /// sampling from a GPT): under zero3/fsdp the units gather their parameters as they run and free
  /// them after, so every rank calls it as often, with inputs of the same shapes (a collective).
  torch::Tensor run_forward(const std::function<torch::Tensor()>& fn);
  /// This rank's bytes of model states now, by the ZeRO paper's parts: under ZeRO the engine's shards,
  /// buffers and gathered units; otherwise the parameters this rank trains, their gradients and the
  /// optimizer's state.
  MemoryReport memory_report() const;
  /// The same parts as cohort-plan predicts them for this rank (src/zero/memory_plan.h, the ZeRO
  /// paper's formulas): this model's parameters, the strategy's stage, the world size, the precision
  /// and the optimizer. buffer_bytes and cached_bytes are 0 (the formulas count model states only).
  MemoryReport planned_memory() const;
  /// The ranks each sharded tensor is cut over (cohort-plan's --ranks): the data-parallel ranks, one
  /// replica's under HSDP; 1 when nothing is sharded (ddp, ZeRO stage 0).
  int shard_ranks() const;
  /// Default root for logs and checkpoints (the option, or the working directory).
  std::string root_dir() const;
  const std::vector<std::shared_ptr<Logger>>& loggers() const;

 private:
  std::unique_ptr<detail::TrainerImpl> impl_;
};

}  // namespace cohort
COHORT_EXPORT_END
