// ProgressBarCallback (see cohort/progress.h): one bar per training epoch on rank 0. The bar counts
// this epoch's batches from where it started (after a resume: the batches still to run), cut short
// by max_steps as the loop is.
#include <algorithm>

#include "cohort/progress.h"
#include "cohort/trainer.h"

namespace cohort {

ProgressBarCallback::ProgressBarCallback(const std::string& style, std::FILE* stream)
    : style_(progress_style_named(style, stream)), stream_(stream) {}

void ProgressBarCallback::on_train_epoch_start(Trainer& trainer, TrainingModule& module) {
  if (!trainer.world().is_main() || style_ == ProgressStyle::kOff) return;
  const TrainerOptions& options = trainer.options();
  first_sample_ = trainer.samples_in_epoch();
  first_batch_ = trainer.batches_done_in_epoch();
  int64_t total = trainer.num_training_batches() - trainer.batches_done_in_epoch();
  if (options.max_steps() >= 0)
    total = std::min(total, (options.max_steps() - trainer.global_step()) * options.accumulate_grad_batches());
  std::string label = "epoch " + std::to_string(trainer.current_epoch() + 1);
  if (options.max_epochs() >= 0) label += "/" + std::to_string(options.max_epochs());
  bar_ = std::make_unique<ProgressBar>(label, total, style_, stream_);
}

void ProgressBarCallback::on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) {
  if (!bar_) return;
  std::map<std::string, double> shown = trainer.progress_bar_metrics();
  const double loss = shown.count("loss") ? shown["loss"] : 0.0;
  shown.erase("loss");
  bar_->update(trainer.batches_done_in_epoch() - first_batch_, loss, trainer.samples_in_epoch() - first_sample_, shown);
}

void ProgressBarCallback::on_train_epoch_end(Trainer& trainer, TrainingModule& module) {
  if (!bar_) return;
  bar_->finish();
  bar_.reset();
}

}  // namespace cohort
