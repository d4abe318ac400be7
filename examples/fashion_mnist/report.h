// What the Fashion-MNIST job prints and keeps across a resume, as a Trainer callback: one summary
// line per epoch (train loss, exact test accuracy, times), and the lr rule of a resume: this run's
// --lr (or ds_config lr) wins over the checkpoint's, as setting a param group's lr after loading does
// in PyTorch, and a change is said.
#pragma once

#include <cohort/trainer.h>

#include <optional>
#include <string>

#include "module.h"

namespace fashion_mnist {

struct LrRule {
  std::optional<double> configured;  ///< none when a ds_config scheduler sets the lr every step
  std::string source = "--lr";       ///< or "--deepspeed-config"
  bool applies = true;               ///< false under ZeRO: the engine keeps its configured lr
};

class JobReport : public cohort::Callback {
 public:
  JobReport(FashionMnistModule& module, LrRule lr, int epochs);
  void on_fit_start(cohort::Trainer& trainer, cohort::TrainingModule& module) override;
  void on_train_epoch_end(cohort::Trainer& trainer, cohort::TrainingModule& module) override;
  void save_state(std::map<std::string, std::string>& values) const override;
  void load_state(const std::map<std::string, std::string>& values) override;
  void check_state(const std::map<std::string, std::string>& values) const override;
  /// The line of an epoch cut short by --max-steps (evaluated after fit).
  void print_partial_epoch(cohort::Trainer& trainer, const std::map<std::string, double>& test);
  void set_test_samples(int64_t samples) { test_samples_ = samples; }

 private:
  std::string accuracy_text(double accuracy) const;
  void print_epoch(int64_t epoch, double train_loss, double accuracy);
  FashionMnistModule& module_;
  LrRule lr_;
  int epochs_;
  int64_t test_samples_ = 0;
  cohort::Trainer* trainer_ = nullptr;
};

}  // namespace fashion_mnist
