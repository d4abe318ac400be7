// What TrainingModule::log records, by stage: the values of the current step and the sums that make
// each epoch value an exact sample-weighted mean. Values logged with sync_dist are reduced over the
// ranks (one reduce_metrics per step with such values, one per epoch): every rank must log the same
// sync_dist names in a step or epoch, as in Lightning.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/training_module.h"

namespace cohort::detail {

enum class Stage { kTrain, kValidate, kTest };

class MetricStore {
 public:
  /// Records `value` of a batch of `batch_size` samples in `stage`.
  void log(const std::string& name, double value, const LogOptions& options, Stage stage, int64_t batch_size);
  /// The step values logged since the last call (sync_dist ones averaged over ranks), keyed as
  /// Lightning keys them ("loss", or "loss_step" when the epoch mean is recorded too).
  std::map<std::string, double> take_step(Comm& comm);
  /// The epoch means of `stage` so far (sync_dist ones exact over ranks: a collective when any).
  std::map<std::string, double> epoch_means(Stage stage, Comm& comm) const;
  /// epoch_means, then forgets them.
  std::map<std::string, double> take_epoch(Stage stage, Comm& comm);
  /// Names logged with prog_bar(true) (as keyed in the results).
  const std::set<std::string>& prog_bar() const { return prog_bar_; }
  /// Names whose values go to the loggers.
  bool to_logger(const std::string& key) const { return !no_logger_.count(key); }
  /// This rank's running epoch sums of `stage` as text, one line a name: what a checkpoint carries so
  /// that an epoch resumed at any batch (or at its end) reports the means of all its batches.
  std::string epoch_sums_text(Stage stage) const;
  /// Replaces the epoch sums of `stage` with `texts` added together (the saved ranks' epoch_sums_text
  /// this rank takes over). A damaged text is an I/O error naming `source`.
  /// Sets the epoch's sums to those of `texts` added, times `times` / `per` (each sample counted `per`
  /// times in them, `times` in this run's).
  void restore_epoch_sums(Stage stage, const std::vector<std::string>& texts, const std::string& source,
                          int64_t times = 1, int64_t per = 1);
  /// The names of `text` (an epoch_sums_text) whose means are synchronized over ranks; a damaged
  /// text throws as restore_epoch_sums does. What a checkpoint's check reads before loading.
  static std::set<std::string> synced_names_of(const std::string& text, const std::string& source);
  /// Sets the epoch sums of `stage` to the synchronized names of `text` with nothing summed: a rank
  /// that takes over no saved sums still joins the means' collective at the epoch's end.
  void restore_synced_names(Stage stage, const std::string& text, const std::string& source);

 private:
  struct Sum {
    double weighted = 0;
    int64_t samples = 0;
    bool sync = false;
  };
  struct StepValue {
    double value = 0;
    bool sync = false;
  };
  std::map<std::string, StepValue> step_;
  std::map<Stage, std::map<std::string, Sum>> epoch_;
  std::set<std::string> prog_bar_, no_logger_;
};

}  // namespace cohort::detail
