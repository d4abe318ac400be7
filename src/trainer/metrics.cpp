// MetricStore (see metrics.h).
#include "trainer/metrics.h"

#include <torch/torch.h>

#include <vector>

#include "cohort/ddp.h"

namespace cohort::detail {

void MetricStore::log(const std::string& name, double value, const LogOptions& options, Stage stage,
                      int64_t batch_size) {
  // Lightning's defaults: step values in training, epoch means in evaluation.
  const bool on_step = options.on_step().value_or(stage == Stage::kTrain);
  const bool on_epoch = options.on_epoch().value_or(stage != Stage::kTrain);
  const bool both = on_step && on_epoch;
  if (on_step && stage == Stage::kTrain) {
    const std::string key = both ? name + "_step" : name;
    step_[key] = {value, options.sync_dist()};
    if (options.prog_bar()) prog_bar_.insert(key);
    if (!options.logger()) no_logger_.insert(key);
  }
  if (on_epoch) {
    const std::string key = both ? name + "_epoch" : name;
    Sum& sum = epoch_[stage][key];
    sum.weighted += value * static_cast<double>(batch_size);
    sum.samples += batch_size;
    sum.sync = options.sync_dist();
    if (options.prog_bar()) prog_bar_.insert(key);
    if (!options.logger()) no_logger_.insert(key);
  }
}

std::map<std::string, double> MetricStore::take_step(Comm& comm) {
  std::map<std::string, double> out;
  std::vector<std::string> synced;
  std::vector<double> values;
  for (const auto& [key, step] : step_) {
    out[key] = step.value;
    if (step.sync) {
      synced.push_back(key);
      values.push_back(step.value);
    }
  }
  step_.clear();
  if (!synced.empty()) {
    const auto sums = reduce_metrics({torch::tensor(values, torch::kFloat64)}, &comm);
    for (size_t i = 0; i < synced.size(); ++i)
      out[synced[i]] = sums[0][static_cast<int64_t>(i)].item<double>() / comm.size();
  }
  return out;
}

std::map<std::string, double> MetricStore::take_epoch(Stage stage, Comm& comm) {
  std::map<std::string, double> out;
  std::vector<std::string> synced;
  std::vector<double> weighted, samples;
  for (const auto& [key, sum] : epoch_[stage]) {
    out[key] = sum.samples > 0 ? sum.weighted / static_cast<double>(sum.samples) : 0.0;
    if (sum.sync) {
      synced.push_back(key);
      weighted.push_back(sum.weighted);
      samples.push_back(static_cast<double>(sum.samples));
    }
  }
  epoch_.erase(stage);
  if (!synced.empty()) {
    const auto sums = reduce_metrics(
        {torch::tensor(weighted, torch::kFloat64), torch::tensor(samples, torch::kFloat64)}, &comm);
    for (size_t i = 0; i < synced.size(); ++i) {
      const auto at = static_cast<int64_t>(i);
      out[synced[i]] = sums[0][at].item<double>() / sums[1][at].item<double>();
    }
  }
  return out;
}

}  // namespace cohort::detail
