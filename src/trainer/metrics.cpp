// MetricStore (see metrics.h).
#include "trainer/metrics.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/ddp.h"
#include "core/check.h"

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

std::map<std::string, double> MetricStore::epoch_means(Stage stage, Comm& comm) const {
  std::map<std::string, double> out;
  const auto found = epoch_.find(stage);
  if (found == epoch_.end()) return out;
  std::vector<std::string> synced;
  std::vector<double> weighted, samples;
  for (const auto& [key, sum] : found->second) {
    out[key] = sum.samples > 0 ? sum.weighted / static_cast<double>(sum.samples) : 0.0;
    if (sum.sync) {
      synced.push_back(key);
      weighted.push_back(sum.weighted);
      samples.push_back(static_cast<double>(sum.samples));
    }
  }
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

std::map<std::string, double> MetricStore::take_epoch(Stage stage, Comm& comm) {
  std::map<std::string, double> out = epoch_means(stage, comm);
  epoch_.erase(stage);
  return out;
}

// "<sync 0|1> <weighted sum> <samples> <name>" a line; %.17g reads back bit for bit, the name comes
// last since it may hold spaces.
std::string MetricStore::epoch_sums_text(Stage stage) const {
  std::string text;
  const auto found = epoch_.find(stage);
  if (found == epoch_.end()) return text;
  for (const auto& [key, sum] : found->second) {
    char numbers[64];
    std::snprintf(numbers, sizeof numbers, "%d %.17g %lld ", sum.sync ? 1 : 0, sum.weighted,
                  static_cast<long long>(sum.samples));
    text += numbers + key + "\n";
  }
  return text;
}

namespace {

struct SumLine {
  int sync = -1;
  double weighted = 0;
  int64_t samples = -1;
  std::string key;
};

// One line of epoch_sums_text: "<sync 0|1> <weighted sum> <samples> <name>". Anything else (a
// number that does not read, a weight that is not finite) is damage, named with `source`.
SumLine read_sum_line(const std::string& line, const std::string& source) {
  std::istringstream in(line);
  SumLine out;
  in >> out.sync >> out.weighted >> out.samples;
  const bool spaced = in.get() == ' ';  // "1e15" or "500.5" samples read as 1 or 500 and a name "15 ..."
  std::getline(in, out.key);
  // A sum without samples is damage too (hostile pass 11, m-d: it resumed to a loss twice the real one).
  COHORT_CHECK_KIND(kIO,
                    !in.fail() && spaced && (out.sync == 0 || out.sync == 1) && std::isfinite(out.weighted) &&
                        out.samples >= 0 && (out.samples > 0 || out.weighted == 0) && !out.key.empty(),
                    source, ": the epoch's logged values are damaged (line \"", line.substr(0, 80), "\")");
  return out;
}

}  // namespace

std::set<std::string> MetricStore::synced_names_of(const std::string& text, const std::string& source) {
  std::set<std::string> synced;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const SumLine sum = read_sum_line(line, source);
    if (sum.sync == 1) synced.insert(sum.key);
  }
  return synced;
}

void MetricStore::restore_synced_names(Stage stage, const std::string& text, const std::string& source) {
  std::map<std::string, Sum> sums;
  for (const auto& name : synced_names_of(text, source)) sums[name].sync = true;
  epoch_[stage] = std::move(sums);
}

void MetricStore::restore_epoch_sums(Stage stage, const std::vector<std::string>& texts, const std::string& source,
                                     int64_t times, int64_t per) {
  std::map<std::string, Sum> sums;
  for (const auto& text : texts) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      const SumLine part = read_sum_line(line, source);
      Sum& sum = sums[part.key];
      sum.weighted += part.weighted;
      sum.samples += part.samples;
      sum.sync = part.sync == 1;
    }
  }
  if (times != per) {
    for (auto& [key, sum] : sums) {
      sum.weighted = sum.weighted * static_cast<double>(times) / static_cast<double>(per);
      sum.samples = sum.samples * times / per;  // `per` identical copies: a multiple of it
    }
  }
  epoch_[stage] = std::move(sums);
}

}  // namespace cohort::detail
