// Rank 0's progress bar: step/total, loss, global samples/s and ETA. On a terminal it is redrawn in
// place with '\r'; when stdout is a pipe or file (a launcher, a batch job's log) it degrades to a
// plain line every ~10%, so logs stay readable. ProgressBarCallback draws it for cohort::Trainer.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "cohort/export.h"
#include "cohort/trainer_callbacks.h"

COHORT_EXPORT_BEGIN
namespace cohort {

enum class ProgressStyle {
  kInPlace,  ///< one line redrawn with '\r' (a terminal)
  kLines,    ///< a new line every ~10% of the steps and at the end (a pipe or a file)
  kOff,      ///< nothing (ranks other than 0)
};

/// kInPlace when `stream` is a terminal, else kLines.
ProgressStyle progress_style_for(std::FILE* stream);
/// The style named "bar", "lines", "off", or "auto" (progress_style_for). Throws
/// std::invalid_argument for another name.
ProgressStyle progress_style_named(const std::string& name, std::FILE* stream);

/// What one redraw shows; pure data so that format_progress can be tested alone.
struct ProgressState {
  std::string label;  ///< e.g. "epoch 1/2"
  int64_t step = 0;   ///< steps done
  int64_t total = 0;  ///< steps in this epoch
  double loss = 0;    ///< running mean loss of the epoch so far
  double samples_per_second = 0;
  double eta_seconds = 0;
  /// More values shown after the ETA ("  val_acc 0.8812"), e.g. metrics logged with prog_bar.
  std::map<std::string, double> extra;
};

/// "epoch 1/2 [#######.............]  234/469  loss 0.4123  2512 samples/s  ETA 0:23".
std::string format_progress(const ProgressState& state);
/// "0:07", "12:34", "1:02:03".
std::string format_duration(double seconds);

/// One epoch's bar. update() after each step; finish() once at the end (ends the line).
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, ProgressStyle style, std::FILE* stream = stdout);
  /// `samples` counts the samples all ranks have processed so far in this epoch.
  void update(int64_t step, double loss, int64_t samples, const std::map<std::string, double>& extra = {});
  void finish();

 private:
  void draw(bool force);

  ProgressState state_;
  ProgressStyle style_;
  std::FILE* stream_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t last_decile_ = 0;
  int64_t last_printed_step_ = 0;
  size_t last_width_ = 0;
  bool finished_ = false;
};

/// The Trainer's progress bar (Lightning's TQDMProgressBar): on rank 0, one bar per training epoch
/// with the running loss and the metrics logged with prog_bar(true).
class ProgressBarCallback : public Callback {
 public:
  /// "auto", "bar", "lines" or "off" (see progress_style_named).
  explicit ProgressBarCallback(const std::string& style = "auto", std::FILE* stream = stdout);
  void on_train_epoch_start(Trainer& trainer, TrainingModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) override;
  void on_train_epoch_end(Trainer& trainer, TrainingModule& module) override;

 private:
  ProgressStyle style_;
  std::FILE* stream_;
  std::unique_ptr<ProgressBar> bar_;
  int64_t first_sample_ = 0;
  int64_t first_batch_ = 0;
};

}  // namespace cohort
COHORT_EXPORT_END
