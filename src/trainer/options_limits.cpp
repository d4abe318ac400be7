// The Lightning options that bound a run (see options.h): limit_train_batches / limit_val_batches,
// fast_dev_run, num_sanity_val_steps and max_time, and the fsdp units' options. Each bad value is one
// line naming the option, the value and what is accepted, like every other TrainerOptions check.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "core/check.h"
#include "core/text.h"
#include "trainer/options.h"

namespace cohort::detail {
namespace {

std::string limit_text(const BatchLimit& limit) {
  return limit.is_count ? std::to_string(static_cast<int64_t>(limit.value)) : number_text(limit.value);
}

// A count >= min_count, or a fraction in [min_fraction, 1] (the lower end open when it is above 0).
void check_limit(const std::string& option, const BatchLimit& limit, bool zero_allowed) {
  const std::string accepted = zero_allowed ? "a number of batches >= 0 or a fraction in [0, 1] (0: none)"
                                            : "a number of batches >= 1 or a fraction in (0, 1]";
  const double v = limit.value;
  const bool ok = limit.is_count ? v >= (zero_allowed ? 0 : 1)
                                 : std::isfinite(v) && v <= 1.0 && (zero_allowed ? v >= 0 : v > 0);
  if (!ok) refuse(option, limit_text(limit), accepted);
}

// "DD:HH:MM:SS" (Lightning's string) or a number of seconds; 0 for "".
double parse_max_time(const std::string& text) {
  if (text.empty()) return 0;
  const std::string accepted = "\"DD:HH:MM:SS\" (e.g. \"00:12:00:00\") or a number of seconds > 0";
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t colon; (colon = text.find(':', start)) != std::string::npos; start = colon + 1)
    fields.push_back(text.substr(start, colon - start));
  fields.push_back(text.substr(start));
  double seconds = 0;
  if (fields.size() == 4) {
    const double unit[4] = {86400, 3600, 60, 1};
    for (size_t i = 0; i < 4; ++i) {
      if (fields[i].empty() || fields[i].size() > 6 || !all_digits(fields[i])) refuse("max_time", text, accepted);
      seconds += unit[i] * std::stod(fields[i]);
    }
  } else {
    size_t used = 0;
    try {
      if (fields.size() == 1 && text.find_first_not_of("0123456789.e+-") == std::string::npos)
        seconds = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size()) refuse("max_time", text, accepted);
  }
  if (!std::isfinite(seconds) || seconds <= 0) refuse("max_time", text, accepted);
  return seconds;
}

// Units' options are read by the ZeRO engine at stage 3 only; given to another strategy, a mistake.
void check_unit_options(const TrainerOptions& options, const ResolvedOptions& out) {
  const bool stage3 = (out.strategy == StrategyKind::kZero && out.zero_stage == 3) ||
                      out.strategy == StrategyKind::kDeepSpeed;
  if (stage3) return;
  const std::string accepted = "its default unless strategy is fsdp or zero3 (strategy is \"" + options.strategy() +
                               "\")";
  if (!options.reshard_after_forward()) refuse("reshard_after_forward", "false", "true, " + accepted);
  if (options.activation_checkpointing())
    refuse("activation_checkpointing", "true", "false, " + accepted + "; elsewhere call cohort::checkpoint in forward");
}

// SyncBatchNorm needs one process per replica (dp's replicas are threads) and the whole model on each
// (a pipeline stage holds a part of it).
void check_sync_batchnorm(const TrainerOptions& options, const ResolvedOptions& out) {
  if (!options.sync_batchnorm()) return;
  if (out.strategy == StrategyKind::kDp || out.strategy == StrategyKind::kPipeline)
    refuse(
        "sync_batchnorm", "true",
        "false with strategy \"" + options.strategy() + "\" (ddp, zero1-3, fsdp and deepspeed synchronise BatchNorm)");
}

}  // namespace

void resolve_limits(const TrainerOptions& options, ResolvedOptions& out) {
  check_limit("limit_train_batches", options.limit_train_batches(), false);
  check_limit("limit_val_batches", options.limit_val_batches(), true);
  if (options.num_sanity_val_steps() < -1)
    refuse("num_sanity_val_steps", std::to_string(options.num_sanity_val_steps()),
           "an integer >= 0, or -1 for the whole validation loader");
  if (options.fast_dev_run() < 0)
    refuse("fast_dev_run", std::to_string(options.fast_dev_run()), "true or a number of batches >= 1; false or 0: off");
  out.max_time_seconds = parse_max_time(options.max_time());
  check_unit_options(options, out);
  check_sync_batchnorm(options, out);
  if (options.fast_dev_run() > 0) {  // Lightning's fast_dev_run: n batches of everything, one epoch, no state
    const int64_t n = options.fast_dev_run();
    out.raw.limit_train_batches(n)
        .limit_val_batches(n)
        .max_epochs(1)
        .max_steps(n)
        .num_sanity_val_steps(0)
        .val_check_interval(1.0)
        .check_val_every_n_epoch(1)
        .enable_checkpointing(false)
        .logger(false)
        .max_time("");
    out.val_every_batches = 0;
    out.val_fraction = 1.0;
    out.max_time_seconds = 0;
  }
}

int64_t limited_batches(const BatchLimit& limit, int64_t available, const std::string& option) {
  if (limit.is_count) return std::min(available, static_cast<int64_t>(limit.value));
  const auto batches = static_cast<int64_t>(std::floor(limit.value * static_cast<double>(available)));
  COHORT_CHECK_KIND(kInvalidArgument, batches > 0 || limit.value == 0 || available == 0, "TrainerOptions.", option, " ",
                    number_text(limit.value), " leaves no batch of the ", available,
                    " this rank has per epoch: expected a fraction of at least ",
                    number_text(1.0 / static_cast<double>(available)), ", or a number of batches");
  return batches;
}

}  // namespace cohort::detail

namespace cohort {

TrainerOptions& TrainerOptions::max_time(double seconds) {
  std::ostringstream text;
  text.precision(15);
  text << seconds;
  max_time_ = text.str();
  return *this;
}

}  // namespace cohort
