// load_checkpoint: rank 0 lists the candidates (the step directory `latest` names, then the other
// step directories, newest first) and every rank stages the first one; the ranks agree through an
// allgather of their statuses, so they all commit the same checkpoint or all fall back to the next
// one (with a warning saying why) or all raise. Live state is written only at commit.
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "checkpoint/async_saves.h"
#include "checkpoint/counter_values.h"
#include "checkpoint/entry.h"
#include "checkpoint/files.h"
#include "checkpoint/format_versioned.h"
#include "checkpoint/group.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/part_lender.h"
#include "checkpoint/stage.h"
#include "checkpoint/step_tensors.h"
#include "checkpoint/tensor_reader.h"
#include "core/check.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace cohort {
namespace detail::ckpt {
namespace {

// Step directories to try, best first. Empty when `dir` holds no checkpoint; `none` says why.
std::vector<std::string> candidates(const std::string& dir, std::string* none) {
  if (!path_exists(dir)) {
    *none = "checkpoint directory " + dir + " does not exist";
    return {};
  }
  if (path_exists((fs::path(dir) / "manifest.json").string())) return {dir};  // a step directory itself
  COHORT_CHECK_KIND(kInvalidArgument, fs::is_directory(dir), "checkpoint path ", dir, " is not a directory");
  std::vector<std::string> out;
  bool replaced = false;
  const std::string latest = latest_step_to_load(dir, &replaced);  // throws for a pointer leading out of `dir`
  if (!latest.empty()) out.push_back(latest);
  if (replaced)
    COHORT_WARN("checkpoint ", read_latest(dir), " is missing (a save replacing it was interrupted): loading its ",
                "previous copy ", latest);
  for (const auto& [step, path] : step_directories(dir)) {
    if (out.empty() || path != out[0]) out.push_back(path);
  }
  if (out.empty()) *none = "checkpoint directory " + dir + " holds no checkpoint (no 'latest', no step-<n>)";
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

// Rank 0 lists the candidates and tells every rank: {"paths", path...}, {"none", why} or {"error",
// what}, as items of any bytes (a directory's name may hold a newline). None: nullopt, or an error
// when options.must_exist().
std::optional<std::vector<std::string>> agreed_candidates(Group& group, const std::string& dir,
                                                          const LoadOptions& options) {
  std::vector<std::string> listing;  // "paths" and the paths, "none" and why, or "error" and what
  if (group.rank() == 0) {
    try {
      std::string none;
      const auto paths = candidates(dir, &none);
      listing = {paths.empty() ? "none" : "paths"};
      listing.insert(listing.end(), paths.begin(), paths.end());
      if (paths.empty()) listing.push_back(none);
    } catch (const std::exception& e) {
      listing = {"error", without_rank_prefix(e.what())};
    }
  }
  listing = group.allgather_lists(listing)[0];
  COHORT_CHECK_KIND(kIO, listing.at(0) != "error", listing.at(1));
  if (listing.at(0) == "none") {
    COHORT_CHECK_KIND(kInvalidArgument, !options.must_exist(), listing.at(1));
    COHORT_INFO(listing.at(1), "; starting from scratch");
    return std::nullopt;
  }
  return std::vector<std::string>(listing.begin() + 1, listing.end());
}

// What this state holds, after creating lazily made state (optimizer moments), and its mode.
LoadRequest request_of(const std::vector<CheckpointState::Entry>& entries) {
  LoadRequest request;
  std::map<std::string, StateValues> values;
  for (const auto& entry : entries) {
    entry.stateful->prepare_load();
    request.entries.push_back(entry.name);
    values[entry.name] = entry.stateful->state_values();
    for (StateTensor& t : entry.stateful->state_tensors()) {
      request.wanted.push_back(
          {entry.name + "/" + t.name, t, entry.tensors_optional || entry.stateful->tensors_optional(), entry.stateful});
    }
  }
  request.zero_stage = zero_stage_of(values);
  return request;
}

// The kOwned and kSharded tensors every rank lists (see LoadRequest::listed_anywhere).
std::set<std::string> listed_anywhere(Group& group, const LoadRequest& request) {
  std::vector<std::string> mine;
  for (const Wanted& w : request.wanted)
    if (w.tensor.kind == StateKind::kOwned || w.tensor.kind == StateKind::kSharded) mine.push_back(w.name);
  std::set<std::string> out;
  for (const auto& names : group.allgather_lists(mine)) out.insert(names.begin(), names.end());
  return out;
}

// Every rank's staging status ("" or "M<message>" for a mismatch, "E<message>"); the first problem,
// "rank r: "-prefixed when another rank's, or "".
std::string agreed_problem(Group& group, const std::string& status, bool* mismatch) {
  const auto statuses = group.allgather(status);
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].empty()) continue;
    *mismatch = statuses[r][0] == 'M';
    return (static_cast<int>(r) == group.rank() ? "" : "rank " + std::to_string(r) + ": ") + statuses[r].substr(1);
  }
  return "";
}

// The program's own check of the user values (CheckpointState::check_user_values) before the tensors are
// matched: a program that saves its model's settings names the one that differs (gpt's --n-layer)
// instead of a tensor's shape (hostile pass 17, M-1).
void check_user_values_first(const std::string& path, const CheckpointState& state) {
  const auto& check = state.user_values_check();
  if (!check) return;
  const Manifest manifest = read_manifest(path + "/manifest.json");
  try {
    check(manifest.user, manifest.world_size);
  } catch (const Error& e) {
    // A value saved under settings this run does not have (another model size): an older checkpoint
    // of the same run has them too, so the load stops here instead of walking back (hostile pass 18 m-2).
    if (e.kind() == ErrorKind::kInvalidArgument)
      throw MismatchError("checkpoint " + path + ": " + without_rank_prefix(e.what()), ErrorKind::kInvalidArgument);
    throw Error(path + "/manifest.json: " + without_rank_prefix(e.what()), ErrorKind::kIO);
  } catch (const std::exception& e) {
    throw Error(path + "/manifest.json: " + without_rank_prefix(e.what()), ErrorKind::kIO);
  }
}

// Each Stateful's check of its saved numbers (Stateful::check_state_values), before commit: a number
// it cannot take (a sampler position of -1000) makes this checkpoint unusable as damage does, so the
// ranks fall back together instead of failing, or crashing, half way through commit.
void check_values(const Staged& staged, const std::vector<CheckpointState::Entry>& entries, const std::string& path) {
  for (const auto& entry : entries) {
    const auto values = staged.manifest.values.find(entry.name);
    if (values == staged.manifest.values.end()) continue;  // check_match named any that must be there
    try {
      check_counter_values(values->second, entry.name);
      check_entry_counters(staged.manifest, entry.name);
      tell_format_version(*entry.stateful, staged.manifest.format_version);
      entry.stateful->check_state_values(values->second, staged.manifest.world_size);
    } catch (const std::exception& e) {
      throw Error(path + "/manifest.json: " + without_rank_prefix(e.what()), ErrorKind::kIO);
    }
  }
  for (const auto& [name, tensor] : staged.tensors) {  // this rank's step tensors, as verify reads them
    const TensorRecord* r = staged.manifest.find(name);
    if (r == nullptr || !is_step_tensor(*r)) continue;
    try {
      check_step_tensor(staged.manifest, *r, tensor.to(torch::kLong).item<int64_t>());
    } catch (const std::exception& e) {  // named with the file that holds the value
      const std::string file = r->pieces.empty() ? "" : "/" + r->pieces.front().file;
      throw Error(path + file + ": " + without_rank_prefix(e.what()), ErrorKind::kIO);
    }
  }
}

// The staged tensors into the live ones; a part's tensors (deferred) read again while their part is
// lent, a part at a time. The second read fails only when the files changed or broke since staging:
// the live state is then partly loaded, and the message says so.
void copy_tensors(const Staged& staged, const LoadRequest& request) {
  torch::NoGradGuard no_grad;
  PartLender lender(/*changes=*/true);
  TensorReader reader(staged.path, staged.manifest, staged.rank);
  try {
    for (const Wanted& w : request.wanted) {
      const auto it = staged.tensors.find(w.name);
      if (it != staged.tensors.end()) {
        lender.live(*w.owner, w.tensor, w.name).copy_(it->second);
      } else if (staged.deferred.count(w.name)) {
        const torch::Tensor value = reader.read(w.name, w.tensor, *staged.manifest.find(w.name));
        lender.live(*w.owner, w.tensor, w.name).copy_(value);
      }
    }
    lender.finish();
  } catch (const std::exception& e) {
    throw Error("checkpoint " + staged.path + " failed while its tensors were copied in, after every rank had " +
                    "checked it (changed or damaged since?): " + without_rank_prefix(e.what()) +
                    "; this process's model and optimizer are partly loaded: restart it (or load a checkpoint "
                    "again) before training",
                ErrorKind::kIO);
  }
}

// Writes the staged checkpoint into the live state: tensors, Statefuls' values, step, user values.
CheckpointInfo commit(const Staged& staged, const LoadRequest& request,
                      const std::vector<CheckpointState::Entry>& entries, CheckpointState& state) {
  copy_tensors(staged, request);
  torch::NoGradGuard no_grad;
  for (const auto& entry : entries) {
    const auto values = staged.manifest.values.find(entry.name);
    try {
      entry.stateful->load_state_values(values == staged.manifest.values.end() ? StateValues{} : values->second);
    } catch (const Error& e) {  // named with its checkpoint (hostile pass 8: "the sampler has seed -1" alone)
      throw Error("checkpoint " + staged.path + ": '" + entry.name + "': " + without_rank_prefix(e.what()), e.kind());
    }
  }
  state.set_step(staged.manifest.step);
  state.mutable_user_values() = staged.manifest.user;
  CheckpointInfo info;
  info.step = staged.manifest.step;
  info.world_size = staged.manifest.world_size;
  info.zero_stage = staged.manifest.zero_stage;
  return info;
}

}  // namespace
}  // namespace detail::ckpt

std::optional<CheckpointInfo> load_checkpoint(const std::string& dir, CheckpointState& state,
                                              const LoadOptions& options) {
  using namespace detail::ckpt;
  Group group(options.comm());
  // A save still being written would be missing from the candidates, or half there.
  AsyncSaves::instance().settle(group, "load_checkpoint(" + dir + ")");
  const auto paths = agreed_candidates(group, dir, options);
  if (!paths) return std::nullopt;
  const auto entries = entries_with_rng(state);
  LoadRequest request = request_of(entries);
  request.listed_anywhere = listed_anywhere(group, request);

  std::vector<std::string> skipped;
  std::string only_problem;  // the reason itself when there was a single candidate
  for (size_t i = 0; i < paths->size(); ++i) {
    const std::string& path = (*paths)[i];
    Staged staged;
    std::string status;
    try {
      check_user_values_first(path, state);
      staged = stage_checkpoint(path, request, group.rank());
      check_values(staged, entries, path);
    } catch (const MismatchError& e) {
      status = "M" + without_rank_prefix(e.what());
    } catch (const std::exception& e) {
      status = "E" + without_rank_prefix(e.what());
    }
    bool mismatch = false;
    const std::string problem = agreed_problem(group, status, &mismatch);
    if (problem.empty()) {
      CheckpointInfo info = commit(staged, request, entries, state);
      info.path = path;
      info.skipped = skipped;
      COHORT_INFO("loaded checkpoint ", info.path, " (step ", info.step, ", saved by ", info.world_size, " rank(s))");
      return info;
    }
    // A checkpoint that does not match the state is the caller's; any other problem is the files'.
    if (mismatch || !options.fallback()) throw Error(problem, mismatch ? ErrorKind::kInvalidArgument : ErrorKind::kIO);
    only_problem = problem;
    skipped.push_back(path + ": " + problem);
    if (group.rank() == 0 && i + 1 < paths->size()) {
      COHORT_WARN("checkpoint ", path, " is unusable (", problem, "); falling back to ", (*paths)[i + 1]);
    }
  }
  if (paths->size() == 1) throw Error(only_problem, ErrorKind::kIO);
  throw Error("no usable checkpoint in " + dir + ": " + join(skipped, "; "), ErrorKind::kIO);
}

}  // namespace cohort
