// The directory side of a save (commit.h).
#include "checkpoint/commit.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/dir_lock.h"
#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "cohort/error.h"
#include "core/log.h"
#include "core/safe_file.h"

namespace fs = std::filesystem;

namespace cohort::detail::ckpt {
namespace {

// Housekeeping around a save (a replaced step, an old step past keep_last, a crashed save's
// temporary): a path that cannot be removed (a file held open on NFS, a directory without write
// permission) is named in a warning, never the save's failure: the save is committed, or about to be.
bool remove_or_warn(const fs::path& path, const char* what) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error)
    COHORT_WARN("checkpoint: could not remove ", path.string(), " (", what, "): ", error.message(),
                "; the save goes on: remove it by hand");
  return !error;
}

// Swaps two directories in one step (renameat2 RENAME_EXCHANGE); false where the filesystem cannot
// (NFS, some FUSE), which then renames in two steps.
bool exchange_directories(const fs::path& a, const fs::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  const int error = errno;
  if (error == EINVAL || error == ENOSYS || error == EOPNOTSUPP) return false;
  throw fs::filesystem_error("cannot exchange", a, b, std::error_code(error, std::generic_category()));
}

// The retention rule (plan_retention in layout.h): later steps are kept and named in a warning, older
// ones beyond keep_last are removed, each removal logged.
void apply_retention(const fs::path& root, int64_t saved, int keep_last) {
  std::vector<int64_t> steps;
  std::map<int64_t, fs::path> paths;
  for (const auto& [step, path] : step_directories(root.string())) {
    steps.push_back(step);
    paths[step] = path;
  }
  const RetentionPlan plan = plan_retention(steps, saved, keep_last);
  if (!plan.newer.empty()) {
    std::string names;
    for (int64_t step : plan.newer) names += (names.empty() ? "" : ", ") + step_dir_name(step);
    COHORT_WARN("checkpoint ", (root / step_dir_name(saved)).string(), " saved while ", root.string(),
                " holds later steps (", names, "): they are kept, not removed; `latest` now names ",
                step_dir_name(saved), ". Remove them by hand if they are no longer wanted");
  }
  for (int64_t step : plan.remove) {
    if (remove_or_warn(paths[step], "older than keep_last allows"))
      COHORT_INFO("removed checkpoint ", paths[step].string(), " (keep_last ", keep_last, ": older than the ",
                  keep_last, " newest up to ", step_dir_name(saved), ")");
  }
}

}  // namespace

// Phase 3 on rank 0: put the finished directory in place, then point `latest` at it. A step saved
// again is swapped with its old copy in one rename (hostile pass 14, S-1: between two renames a crash
// left `latest` naming no directory); where the filesystem cannot swap, the old copy waits in
// `.step-N.old`, which a load takes while step-N is missing. A failure rolls back: nothing of the
// failed save stays, and the step it replaced is whole again (M-1).
void commit(const fs::path& root, const fs::path& tmp, const fs::path& final_dir, int keep_last) {
  const fs::path old = root / old_copy_name(final_dir.filename().string());
  // A copy beside a missing step is what a load takes until this save is in place (review: removing it
  // first left nothing to put back); beside a present step it is stale.
  if (fs::exists(final_dir)) remove_or_warn(old, "a step replaced by an earlier save");
  enum class Placed { kNothing, kFresh, kExchanged, kAside } placed = Placed::kNothing;
  try {
    if (fs::exists(final_dir)) {  // saving a step again replaces it, and says so
      COHORT_WARN("checkpoint ", final_dir.string(), " already existed: replaced by this save");
      if (exchange_directories(tmp, final_dir)) {
        placed = Placed::kExchanged;  // `tmp` holds the replaced step now
      } else {
        fs::rename(final_dir, old);
        placed = Placed::kAside;
      }
    }
    if (placed != Placed::kExchanged) {
      fs::rename(tmp, final_dir);
      if (placed == Placed::kNothing) placed = Placed::kFresh;
    }
    sync_directory(root.string());
    write_file_safely((root / "latest").string(), final_dir.filename().string() + "\n");  // fsyncs root too
  } catch (...) {
    std::error_code ignored;  // the new step back to `tmp` (removed by the caller), the old one in place
    if (placed == Placed::kExchanged) ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE);
    if (placed == Placed::kFresh || placed == Placed::kAside) fs::rename(final_dir, tmp, ignored);
    if (placed == Placed::kAside) fs::rename(old, final_dir, ignored);
    throw;
  }
  remove_or_warn(placed == Placed::kExchanged ? tmp : old, "the step this save replaced");
  apply_retention(root, *parse_step_dir(final_dir.filename().string()), keep_last);
}

void remove_leftovers(const fs::path& root) {
  std::string latest;  // what a load takes first; a hostile pointer is the load's to refuse
  try {
    latest = fs::path(read_latest(root.string())).filename().string();
  } catch (const Error&) {
  }
  for (const auto& item : fs::directory_iterator(root)) {
    const std::string name = item.path().filename().string();
    // cohort's own temporaries only: a step being written, `latest`'s and `.job`'s (safe_file.h); a user's
    // `.notes.tmp` is not ours (hostile pass 17, m-1).
    const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    const bool ours = parse_step_dir(name.substr(1, name.size() >= 5 ? name.size() - 5 : 0)).has_value() ||
                      name.rfind(".latest.", 0) == 0 || name.rfind("..job.", 0) == 0;
    if (name[0] == '.' && tmp && ours) remove_or_warn(item.path(), "left by a save that did not finish");
    // A replaced step's old copy (a crash before its removal; hostile pass 14, M-1).
    const auto step = parse_old_copy(name);
    const bool missing = step && !fs::exists(root / step_dir_name(*step));
    // Kept while it may be what a load takes: its step missing and `latest` naming it (or unreadable).
    if (step && !(missing && (latest.empty() || latest == step_dir_name(*step))))
      remove_or_warn(item.path(), "the old copy of a replaced step");
  }
}

// Phase 1 on rank 0: the checkpoint folder (locked for this job), without leftovers of crashed saves,
// and a fresh `tmp` in it.
void make_fresh_tmp(const fs::path& root, const fs::path& tmp) {
  fs::create_directories(root);
  hold_directory_lock(root.string());
  remove_leftovers(root);
  // Our own, fresh: one there again (someone else's, a planted link) is refused, not written into.
  COHORT_CHECK_KIND(kIO, fs::create_directory(tmp), "cannot make ", tmp.string(), ": something is there again");
}

}  // namespace cohort::detail::ckpt
