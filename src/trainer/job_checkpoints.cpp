// The checkpoints of this job (job_checkpoints.h).
#include "trainer/job_checkpoints.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/safe_file.h"
#include "world/launch_env.h"

namespace cohort::detail {
namespace {

constexpr size_t kTokenChars = 32;  // core/job_secret.h's new_launch_id: 32 random hex digits

bool is_token(const std::string& text) {
  return text.size() == kTokenChars && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The token an earlier attempt wrote, or "" when there is none that reads as one.
std::string read_token(const std::string& path) {
  if (!ckpt::path_exists(path)) return "";
  try {
    std::string text = read_own_file(path, "job token file", 256);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return is_token(text) ? text : "";
  } catch (const Error&) {
    return "";  // a link, a directory, too big: not what an attempt of this job wrote
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    if (comma > begin) out.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return out;
}

// 16 hex digits of FNV-1a: the same on every build and host, and no ',' whatever the launch's text (a
// run id or log directory with a comma split the recorded list: hostile pass 17, S-1).
std::string digest_of(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char byte : text) hash = (hash ^ byte) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

// Whether a step directory in `dir` (or a step's previous copy, which a load takes: commit.h) holds a
// readable checkpoint this job saved.
bool holds_checkpoint_of_job(const std::string& dir, const JobIdentity& identity) {
  if (!ckpt::path_exists(dir)) return false;
  std::vector<std::string> paths;
  for (const auto& [step, path] : ckpt::step_directories(dir)) paths.push_back(path);
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    if (ckpt::parse_old_copy(item.path().filename().string()) && !item.is_symlink())
      paths.push_back(item.path().string());
  }
  for (const std::string& path : paths) {
    try {
      if (identity.saved(ckpt::read_manifest(path + "/manifest.json").user)) return true;
    } catch (const Error&) {
      // damaged or partial: not one to continue from (the load would skip it too)
    }
  }
  return false;
}

}  // namespace

std::string launcher_run_id() { return detect_launch_env(current_env()).run_id; }

// The launcher's log directory of this launch (cohortrun's and torchrun's agents make one per launch and
// name it in TORCHELASTIC_ERROR_FILE as DIR/attempt_N/...), with COHORT_LAUNCH_ID beside it: a
// COHORT_LAUNCH_ID inherited by a torchrun launch (a script started from a cohortrun worker) is the
// same for every such launch, the directory is not (hostile pass 18, S-1).
std::string launch_identity() {
  const auto env = current_env();
  const auto given = env.find("COHORT_LAUNCH_ID");
  const std::string id = given == env.end() ? "" : given->second;
  std::string dir;
  if (const auto error_file = env.find("TORCHELASTIC_ERROR_FILE"); error_file != env.end()) {
    const size_t attempt = error_file->second.rfind("/attempt_");
    if (attempt != std::string::npos && attempt > 0) dir = error_file->second.substr(0, attempt);
  }
  if (id.empty() && dir.empty()) return "";
  return digest_of("launch:" + id + "\n" + dir);
}

std::map<std::string, std::string> JobIdentity::values() const {
  std::string joined;
  for (const std::string& launch : launches) joined += (joined.empty() ? "" : ",") + launch;
  std::map<std::string, std::string> out{{kRunIdKey, launcher_run_id()}};
  if (!joined.empty()) out[kJobLaunchKey] = joined;
  if (!token.empty()) out[kJobTokenKey] = token;
  return out;
}

bool JobIdentity::saved(const std::map<std::string, std::string>& user) const {
  if (!launches.empty()) {
    const auto recorded = user.find(kJobLaunchKey);
    if (recorded == user.end()) return false;
    for (const std::string& launch : split_list(recorded->second))
      if (std::find(launches.begin(), launches.end(), launch) != launches.end()) return true;
    return false;
  }
  const auto saved = user.find(kJobTokenKey);
  return !token.empty() && saved != user.end() && saved->second == token;
}

JobClaim claim_job(const std::string& dir, bool restart, const std::vector<std::string>& launches) {
  JobClaim claim;
  claim.identity.launches = launches;
  if (!launches.empty()) {
    claim.holds_own_checkpoint = restart && holds_checkpoint_of_job(dir, claim.identity);
    return claim;
  }
  const std::string path = dir + "/" + kJobTokenFile;
  if (restart) {
    claim.identity.token = read_token(path);
    claim.token_lost = claim.identity.token.empty();
    claim.holds_own_checkpoint = !claim.token_lost && holds_checkpoint_of_job(dir, claim.identity);
    if (!claim.token_lost) return claim;
  }
  claim.identity.token = new_launch_id();
  try {
    write_file_safely(path, claim.identity.token + "\n");
  } catch (const Error& e) {
    COHORT_CHECK_KIND(kIO, false, "checkpoint directory ", dir,
                      ": cannot write this job's token, which a launcher's restart needs to tell its own "
                      "checkpoints from another job's: ",
                      e.what());
  }
  return claim;
}

void check_saved_by_job(const std::map<std::string, std::string>& user, const JobIdentity& identity) {
  const auto run = user.find(kRunIdKey);
  const std::string by = run == user.end() || run->second.empty() ? "" : " (run id '" + run->second + "')";
  COHORT_CHECK_KIND(kIO, identity.saved(user), "saved by another job", by,
                    ", not by this one, whose restart continues only its own checkpoints");
}

}  // namespace cohort::detail
