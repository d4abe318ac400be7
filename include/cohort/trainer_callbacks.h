// Callbacks of cohort::Trainer (Lightning's names): ModelCheckpoint, EarlyStopping,
// LearningRateMonitor, the progress bar, and the Callback base for one's own. Every hook runs on every
// rank; what only rank 0 should do (print, write logs) the callback checks with trainer.world().
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

class Trainer;
class TrainingModule;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_start(Trainer& trainer, TrainingModule& module) {}
  virtual void on_fit_end(Trainer& trainer, TrainingModule& module) {}
  virtual void on_train_epoch_start(Trainer& trainer, TrainingModule& module) {}
  /// After each optimizer step (the last micro-batch of an accumulation window).
  virtual void on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) {}
  virtual void on_train_epoch_end(Trainer& trainer, TrainingModule& module) {}
  /// After a validation run, its epoch metrics in trainer.callback_metrics().
  virtual void on_validation_end(Trainer& trainer, TrainingModule& module) {}
  /// Numbers this callback keeps across a resume, saved in every checkpoint under its own keys.
  virtual void save_state(std::map<std::string, std::string>& values) const {}
  virtual void load_state(const std::map<std::string, std::string>& values) {}
  /// Throws for saved values load_state() could not take, before any of the checkpoint is loaded:
  /// the load then falls back to an older checkpoint, naming this one (ModelCheckpoint and
  /// EarlyStopping load a copy of themselves). A cohort::Error of kind kInvalidArgument instead
  /// refuses the resume (no fallback): the values were saved under settings this run does not have.
  virtual void check_state(const std::map<std::string, std::string>& values) const {}
  /// Before TrainerOptions::pretrained_weights load (only when no checkpoint resumed), with the file's
  /// metadata (cohort::safetensors_metadata): throw to refuse weights saved for another model.
  virtual void check_pretrained(const std::map<std::string, std::string>& metadata) const {}
};

struct ModelCheckpointOptions {
  /// Where checkpoints go; "": <default_root_dir>/checkpoints. The newest are <dirpath>/step-<n>
  /// with its `latest` pointer (ckpt_path "last"), the best save_top_k by `monitor` in <dirpath>/best.
  TORCH_ARG(std::string, dirpath) = "";
  /// A logged metric to rank checkpoints by; "": no ranking (only the last are kept).
  TORCH_ARG(std::string, monitor) = "";
  /// "min" or "max".
  TORCH_ARG(std::string, mode) = "min";
  /// Best checkpoints kept by `monitor`: -1 all, 0 none.
  TORCH_ARG(int64_t, save_top_k) = 1;
  /// Keep the newest states in <dirpath> (keep_last of them: at least 2 leaves one to fall back on).
  TORCH_ARG(bool, save_last) = true;
  TORCH_ARG(int, keep_last) = 2;
  /// Save every this many optimizer steps (0: not by steps).
  TORCH_ARG(int64_t, every_n_train_steps) = 0;
  /// Save at the end of every this many epochs (after validation); 0: not by epochs.
  TORCH_ARG(int64_t, every_n_epochs) = 1;
  /// Write each save in the background once the state is copied (SaveOptions::async, Lightning's
  /// AsyncCheckpointIO): a step waits only for the copy, and for the save before it when that is still
  /// being written (a save into best/ and one into dirpath at the same step are two). The fit's end
  /// waits for the last write and raises its error.
  TORCH_ARG(bool, async) = false;
};

/// Saves the Trainer's whole state (model or engine shards, optimizer, scheduler, data position,
/// callbacks) with cohort's atomic sharded checkpoints: resumable mid-epoch with ckpt_path "last".
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});
  void on_fit_start(Trainer& trainer, TrainingModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) override;
  void on_train_epoch_end(Trainer& trainer, TrainingModule& module) override;
  void on_fit_end(Trainer& trainer, TrainingModule& module) override;
  void save_state(std::map<std::string, std::string>& values) const override;
  void load_state(const std::map<std::string, std::string>& values) override;
  void check_state(const std::map<std::string, std::string>& values) const override;

  /// The best checkpoints kept, best first: (monitored value, step directory).
  const std::vector<std::pair<double, std::string>>& best_k() const { return best_; }
  std::string best_model_path() const { return best_.empty() ? "" : best_.front().second; }
  /// Where the newest states are (what ckpt_path "last" loads).
  std::string last_dir() const { return options_.dirpath(); }
  const ModelCheckpointOptions& options() const { return options_; }

 private:
  void save(Trainer& trainer);
  void rank(Trainer& trainer);
  void remove_displaced(Trainer& trainer);
  ModelCheckpointOptions options_;
  std::vector<std::pair<double, std::string>> best_;
  std::vector<std::string> displaced_;  // out of the top k, kept until the saves that displaced them are written
  int64_t last_saved_step_ = -1;
};

struct EarlyStoppingOptions {
  TORCH_ARG(std::string, monitor) = "";
  TORCH_ARG(std::string, mode) = "min";
  /// Validation runs without an improvement of more than min_delta before training stops.
  TORCH_ARG(int64_t, patience) = 3;
  TORCH_ARG(double, min_delta) = 0.0;
  /// Stop at once when the monitored value is nan or inf.
  TORCH_ARG(bool, check_finite) = true;
};

/// Stops training when `monitor` stopped improving (checked after each validation run, or at the
/// end of each training epoch when there is no validation). Every rank decides on the same values.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);
  void on_validation_end(Trainer& trainer, TrainingModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainingModule& module) override;
  void save_state(std::map<std::string, std::string>& values) const override;
  void load_state(const std::map<std::string, std::string>& values) override;
  void check_state(const std::map<std::string, std::string>& values) const override;
  /// The step training stopped at (0: it did not stop early), and why.
  int64_t stopped_step() const { return stopped_step_; }
  const std::string& reason() const { return reason_; }

 private:
  void check(Trainer& trainer);
  EarlyStoppingOptions options_;
  bool validated_ = false;
  double best_;
  int64_t wait_ = 0;
  int64_t stopped_step_ = 0;
  std::string reason_;
};

/// Logs the optimizer's learning rate as "lr-<Optimizer>" (Lightning's name), per step or epoch.
class LearningRateMonitor : public Callback {
 public:
  /// "step" or "epoch".
  explicit LearningRateMonitor(std::string logging_interval = "epoch");
  void on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) override;
  void on_train_epoch_start(Trainer& trainer, TrainingModule& module) override;

 private:
  std::string interval_;
};

}  // namespace cohort
COHORT_EXPORT_END
