// ModelCheckpoint (see cohort/trainer_callbacks.h). The newest states go to <dirpath> through
// cohort's retention (keep_last of them, to fall back on); the best save_top_k by `monitor` to
// <dirpath>/best, where rank 0 deletes the ones that fall out of the top k. Scores are rank 0's, so
// every rank takes part in the same saves.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "checkpoint/commit.h"
#include "checkpoint/dir_lock.h"
#include "checkpoint/entry.h"
#include "checkpoint/group.h"
#include "cohort/checkpoint.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "cohort/trainer.h"
#include "core/check.h"
#include "trainer/rank0_value.h"

namespace cohort {
namespace {

std::string available_metrics(const std::map<std::string, double>& metrics) {
  std::string names;
  for (const auto& item : metrics) names += (names.empty() ? "" : ", ") + item.first;
  return names.empty() ? "none yet" : names;
}

// The directory made and a file created in it (and removed) on every rank before the first step: a
// directory that cannot take the checkpoint is named now, not at the first save an epoch later.
void check_writable(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  COHORT_CHECK_KIND(kIO, !error, "ModelCheckpointOptions.dirpath ", dir,
                    ": cannot create the directory: ", error.message());
  std::string probe = dir + "/.write-test-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  COHORT_CHECK_KIND(kIO, fd >= 0, "ModelCheckpointOptions.dirpath ", dir,
                    ": cannot create files in it: ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {
  COHORT_CHECK_KIND(kInvalidArgument, options_.mode() == "min" || options_.mode() == "max",
                    "ModelCheckpointOptions.mode \"", options_.mode(), "\" is not accepted: expected min or max");
  COHORT_CHECK_KIND(kInvalidArgument, options_.save_top_k() >= -1, "ModelCheckpointOptions.save_top_k ",
                    options_.save_top_k(), " is not accepted: expected -1 (all), 0 (none) or a positive number");
  COHORT_CHECK_KIND(kInvalidArgument, options_.every_n_train_steps() >= 0,
                    "ModelCheckpointOptions.every_n_train_steps ", options_.every_n_train_steps(),
                    " is not accepted: expected an integer >= 0");
  COHORT_CHECK_KIND(kInvalidArgument, options_.keep_last() >= 0, "ModelCheckpointOptions.keep_last ",
                    options_.keep_last(), " is not accepted: expected an integer >= 0 (0: keep all)");
  COHORT_CHECK_KIND(kInvalidArgument, options_.every_n_epochs() >= 0, "ModelCheckpointOptions.every_n_epochs ",
                    options_.every_n_epochs(), " is not accepted: expected an integer >= 0");
}

void ModelCheckpoint::on_fit_start(Trainer& trainer, TrainingModule& module) {
  // A write an earlier fit left in flight ends first: the leftovers removed below would include it.
  finish_checkpoint_saves();
  if (options_.dirpath().empty()) options_.dirpath(trainer.root_dir() + "/checkpoints");
  check_writable(options_.dirpath());
  // The directory's lock (checkpoint/dir_lock.h), taken now by the rank that commits saves: a second
  // job on it is refused before its first step, on every rank, not at its first save.
  std::string refusal;
  if (trainer.world().rank() == 0) {
    try {
      detail::ckpt::hold_directory_lock(options_.dirpath());
      // What a save killed at the run's end left (a job whose restart trains nothing saves nothing:
      // hostile pass 16, M-2).
      detail::ckpt::remove_leftovers(options_.dirpath());
    } catch (const Error& error) {
      refusal = detail::ckpt::without_rank_prefix(error.what());
    }
  }
  const std::string first = detail::ckpt::Group(nullptr).allgather(refusal).front();
  COHORT_CHECK_KIND(kInvalidArgument, first.empty(), first);
}

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, TrainingModule& module, int64_t batch_index) {
  const int64_t every = options_.every_n_train_steps();
  if (every > 0 && trainer.global_step() % every == 0) save(trainer);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, TrainingModule& module) {
  const int64_t every = options_.every_n_epochs();
  if (every > 0 && trainer.current_epoch() % every == 0) save(trainer);
}

void ModelCheckpoint::on_fit_end(Trainer& trainer, TrainingModule& module) {
  // The final state, so that ckpt_path "last" continues exactly where this fit ended.
  if (options_.save_last() && trainer.global_step() != last_saved_step_) {
    // Before saving, as save() does: a fit resumed from it that trains no step saves it no more (a
    // finished job's command run again replaced its last step; hostile pass 14, m-2).
    last_saved_step_ = trainer.global_step();
    trainer.save_checkpoint(last_dir(), options_.keep_last(), options_.async());
  }
  // The fit ends when its checkpoints are written: an error of the last write is the fit's.
  if (options_.async()) finish_checkpoint_saves();
  remove_displaced(trainer);
}

void ModelCheckpoint::save(Trainer& trainer) {
  if (trainer.global_step() == last_saved_step_) return;
  // Before saving, so that the state saved knows it: a fit resumed from it saves this step no more.
  last_saved_step_ = trainer.global_step();
  // Ranked first, so that the state saved in last/ knows this step's place in the top k.
  if (!options_.monitor().empty() && options_.save_top_k() != 0) rank(trainer);
  if (options_.save_last()) {
    trainer.save_checkpoint(last_dir(), options_.keep_last(), options_.async());
    remove_displaced(trainer);
  }
}

// Saves into <dirpath>/best when the monitored value makes the top k, then drops the one it displaces.
void ModelCheckpoint::rank(Trainer& trainer) {
  const auto& metrics = trainer.callback_metrics();
  const auto found = metrics.find(options_.monitor());
  COHORT_CHECK_KIND(kInvalidArgument, found != metrics.end(), "ModelCheckpoint: monitor \"", options_.monitor(),
                    "\" was not logged (logged: ", available_metrics(metrics), ")");
  const double score = detail::rank0_value(trainer.world(), found->second);
  if (std::isnan(score)) return;
  const bool minimize = options_.mode() == "min";
  auto better = [minimize](double a, double b) { return minimize ? a < b : a > b; };
  const auto k = static_cast<size_t>(options_.save_top_k());
  if (options_.save_top_k() > 0 && best_.size() >= k && !better(score, best_.back().first)) return;
  const std::string saved = trainer.save_checkpoint(options_.dirpath() + "/best", 0, options_.async());
  remove_displaced(trainer);  // this save waited for the ones that displaced them
  best_.emplace_back(score, saved);
  std::stable_sort(best_.begin(), best_.end(), [&](const auto& a, const auto& b) { return better(a.first, b.first); });
  while (options_.save_top_k() > 0 && best_.size() > k) {
    displaced_.push_back(best_.back().second);
    best_.pop_back();
  }
  if (!options_.async()) remove_displaced(trainer);
}

// An async save is written after its call returns: the best checkpoint it displaces goes only once it
// is (after the next save's call, which waits for it, or the fit's end), so a kill in between leaves one.
void ModelCheckpoint::remove_displaced(Trainer& trainer) {
  if (trainer.world().is_main())
    for (const std::string& path : displaced_) std::filesystem::remove_all(path);
  displaced_.clear();
}

void ModelCheckpoint::save_state(std::map<std::string, std::string>& values) const {
  std::ostringstream best;
  best.precision(17);
  for (const auto& [score, path] : best_) best << score << ' ' << path << '\n';
  values["ModelCheckpoint.best"] = best.str();
  values["ModelCheckpoint.saved_step"] = std::to_string(last_saved_step_);
}

// A value that does not read is damage (kIO: the load falls back), not this run's refusal.
void ModelCheckpoint::check_state(const std::map<std::string, std::string>& values) const {
  ModelCheckpoint copy = *this;  // the same parse as the load, on a copy
  try {
    copy.load_state(values);
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kIO);
  }
}

void ModelCheckpoint::load_state(const std::map<std::string, std::string>& values) {
  if (const auto saved = values.find("ModelCheckpoint.saved_step"); saved != values.end())
    last_saved_step_ = parse_integer(saved->second, {"the checkpoint's ModelCheckpoint.saved_step", -1});
  const auto found = values.find("ModelCheckpoint.best");
  if (found == values.end()) return;
  best_.clear();
  std::istringstream in(found->second);
  std::string line;
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const double inf = std::numeric_limits<double>::infinity();
    best_.emplace_back(
        parse_real(line.substr(0, space), {"the checkpoint's ModelCheckpoint.best score", -inf, inf, "a number", true}),
        line.substr(space + 1));
  }
}

}  // namespace cohort
