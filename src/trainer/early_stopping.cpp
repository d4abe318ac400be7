// EarlyStopping and LearningRateMonitor (see cohort/trainer_callbacks.h).
#include <cmath>
#include <limits>
#include <sstream>

#include "cohort/error.h"
#include "cohort/number.h"
#include "cohort/trainer.h"
#include "core/check.h"
#include "trainer/rank0_value.h"

namespace cohort {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  COHORT_CHECK_KIND(kInvalidArgument, !options_.monitor().empty(),
                    "EarlyStoppingOptions.monitor is empty: name a logged metric");
  COHORT_CHECK_KIND(kInvalidArgument, options_.mode() == "min" || options_.mode() == "max",
                    "EarlyStoppingOptions.mode \"", options_.mode(), "\" is not accepted: expected min or max");
  COHORT_CHECK_KIND(kInvalidArgument, options_.patience() >= 0, "EarlyStoppingOptions.patience ", options_.patience(),
                    " is not accepted: expected an integer >= 0");
  COHORT_CHECK_KIND(kInvalidArgument, std::isfinite(options_.min_delta()) && options_.min_delta() >= 0,
                    "EarlyStoppingOptions.min_delta ", options_.min_delta(),
                    " is not accepted: expected a finite number >= 0");
  best_ = options_.mode() == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

void EarlyStopping::on_validation_end(Trainer& trainer, TrainingModule& module) {
  validated_ = true;
  check(trainer);
}

// Without validation in this epoch, the training metrics decide at its end.
void EarlyStopping::on_train_epoch_end(Trainer& trainer, TrainingModule& module) {
  if (!validated_) check(trainer);
  validated_ = false;
}

void EarlyStopping::check(Trainer& trainer) {
  const auto& metrics = trainer.callback_metrics();
  const auto found = metrics.find(options_.monitor());
  COHORT_CHECK_KIND(kInvalidArgument, found != metrics.end(), "EarlyStopping: monitor \"", options_.monitor(),
                    "\" was not logged");
  const double value = detail::rank0_value(trainer.world(), found->second);
  std::ostringstream why;
  if (options_.check_finite() && !std::isfinite(value)) {
    why << options_.monitor() << " = " << value << " is not finite";
  } else {
    const bool improved = options_.mode() == "min" ? value < best_ - options_.min_delta()
                                                   : value > best_ + options_.min_delta();
    if (improved) {
      best_ = value;
      wait_ = 0;
      return;
    }
    if (++wait_ < options_.patience()) return;
    why << options_.monitor() << " did not improve in the last " << wait_ << " checks; best " << best_;
  }
  if (stopped_step_ == 0) stopped_step_ = trainer.global_step();
  reason_ = why.str();
  trainer.request_stop(reason_);
}

void EarlyStopping::save_state(std::map<std::string, std::string>& values) const {
  std::ostringstream best;
  best.precision(17);
  best << best_;
  values["EarlyStopping.best"] = best.str();
  values["EarlyStopping.wait"] = std::to_string(wait_);
}

// A value that does not read is damage (kIO: the load falls back), not this run's refusal.
void EarlyStopping::check_state(const std::map<std::string, std::string>& values) const {
  EarlyStopping copy = *this;  // the same parse as the load, on a copy
  try {
    copy.load_state(values);
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kIO);
  }
}

void EarlyStopping::load_state(const std::map<std::string, std::string>& values) {
  const auto best = values.find("EarlyStopping.best");
  const auto wait = values.find("EarlyStopping.wait");
  // The checkpoint's user values (no checksum covers them): each refused in one line when malformed.
  const double inf = std::numeric_limits<double>::infinity();
  if (best != values.end())
    best_ = parse_real(best->second, {"the checkpoint's EarlyStopping.best", -inf, inf, "a number", true});
  if (wait != values.end()) wait_ = parse_integer(wait->second, {"the checkpoint's EarlyStopping.wait", 0});
}

LearningRateMonitor::LearningRateMonitor(std::string logging_interval) : interval_(std::move(logging_interval)) {
  COHORT_CHECK_KIND(kInvalidArgument, interval_ == "step" || interval_ == "epoch",
                    "LearningRateMonitor logging_interval \"", interval_, "\" is not accepted: expected step or epoch");
}

namespace {
void log_lr(Trainer& trainer) {
  if (!trainer.world().is_main()) return;
  const std::map<std::string, double> values{{"lr-" + trainer.optimizer_name(), trainer.lr()}};
  for (const auto& logger : trainer.loggers()) logger->log_metrics(values, trainer.global_step());
}
}  // namespace

void LearningRateMonitor::on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) {
  if (interval_ == "step") log_lr(trainer);
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, TrainingModule& module) {
  if (interval_ == "epoch") log_lr(trainer);
}

}  // namespace cohort
