// The checkpoints of this job (job_checkpoints.h).
#include "trainer/job_checkpoints.h"

#include <filesystem>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "cohort/error.h"
#include "core/check.h"
#include "world/launch_env.h"

namespace cohort::detail {

std::string launcher_run_id() { return detect_launch_env(current_env()).run_id; }

bool holds_checkpoint_of_run(const std::string& dir, const std::string& run_id) {
  if (!ckpt::path_exists(dir)) return false;
  std::vector<std::string> paths;
  for (const auto& [step, path] : ckpt::step_directories(dir)) paths.push_back(path);
  // A step being replaced when its saver died, on a filesystem that cannot swap directories: its
  // previous copy, which a load takes (commit.h).
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    if (ckpt::parse_old_copy(item.path().filename().string()) && !item.is_symlink())
      paths.push_back(item.path().string());
  }
  for (const std::string& path : paths) {
    try {
      const ckpt::Manifest manifest = ckpt::read_manifest(path + "/manifest.json");
      const auto saved = manifest.user.find(kRunIdKey);
      if (saved != manifest.user.end() && saved->second == run_id) return true;
    } catch (const Error&) {
      // damaged or partial: not one to continue from (the load would skip it too)
    }
  }
  return false;
}

void check_saved_by_run(const std::map<std::string, std::string>& user, const std::string& run_id) {
  const auto saved = user.find(kRunIdKey);
  const std::string by = saved == user.end() ? "" : saved->second;
  COHORT_CHECK_KIND(kIO, by == run_id, "saved by ", by.empty() ? "a job without a run id" : "job '" + by + "'",
                    ", not by this job ('", run_id, "'), whose restart continues only its own checkpoints");
}

}  // namespace cohort::detail
