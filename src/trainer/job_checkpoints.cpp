// The checkpoints of this job (job_checkpoints.h).
#include "trainer/job_checkpoints.h"

#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/safe_file.h"
#include "world/launch_env.h"

namespace cohort::detail {
namespace {

constexpr size_t kTokenChars = 32;

std::string fresh_token() {
  std::random_device random;
  std::string token;
  while (token.size() < kTokenChars) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(random()));
    token += hex;
  }
  return token.substr(0, kTokenChars);
}

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

// Whether a step directory in `dir` (or a step's previous copy, which a load takes: commit.h) holds a
// readable checkpoint saved with `token`.
bool holds_checkpoint_of_job(const std::string& dir, const std::string& token) {
  if (!ckpt::path_exists(dir)) return false;
  std::vector<std::string> paths;
  for (const auto& [step, path] : ckpt::step_directories(dir)) paths.push_back(path);
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    if (ckpt::parse_old_copy(item.path().filename().string()) && !item.is_symlink())
      paths.push_back(item.path().string());
  }
  for (const std::string& path : paths) {
    try {
      const ckpt::Manifest manifest = ckpt::read_manifest(path + "/manifest.json");
      const auto saved = manifest.user.find(kJobTokenKey);
      if (saved != manifest.user.end() && saved->second == token) return true;
    } catch (const Error&) {
      // damaged or partial: not one to continue from (the load would skip it too)
    }
  }
  return false;
}

}  // namespace

std::string launcher_run_id() { return detect_launch_env(current_env()).run_id; }

JobClaim claim_job_token(const std::string& dir, bool restart) {
  const std::string path = dir + "/" + kJobTokenFile;
  JobClaim claim;
  if (restart) {
    claim.token = read_token(path);
    claim.token_lost = claim.token.empty();
    claim.holds_own_checkpoint = !claim.token.empty() && holds_checkpoint_of_job(dir, claim.token);
    if (!claim.token.empty()) return claim;
  }
  claim.token = fresh_token();
  try {
    write_file_safely(path, claim.token + "\n");
  } catch (const Error& e) {
    COHORT_CHECK_KIND(kIO, false, "checkpoint directory ", dir,
                      ": cannot write this job's token, which a launcher's restart needs to tell its own "
                      "checkpoints from another job's: ",
                      e.what());
  }
  return claim;
}

void check_saved_by_job(const std::map<std::string, std::string>& user, const std::string& token) {
  const auto saved = user.find(kJobTokenKey);
  const auto run = user.find(kRunIdKey);
  const std::string by = run == user.end() || run->second.empty() ? "" : " (run id '" + run->second + "')";
  COHORT_CHECK_KIND(kIO, saved != user.end() && saved->second == token, "saved by another job", by,
                    ", not by this one, whose restart continues only its own checkpoints");
}

}  // namespace cohort::detail
