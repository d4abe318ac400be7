// Which checkpoints a launcher's restart continues from: only those this job saved. A job is known by
// a token its first attempt draws and writes into the checkpoint directory (`.job`, under the
// directory's lock, so a second job cannot take it over while the first runs); every save records it
// and a restart (TORCHELASTIC_RESTART_COUNT > 0) reads it back. The launcher's run id cannot tell two
// jobs apart: torchrun's default is "none" and a script may reuse --rdzv-id (hostile passes 14 S-2,
// 15 S-1). A job that started from a given checkpoint (ckpt_path) continues from its own newer ones
// on a restart instead of going back to where it started (hostile pass 15, S-3).
#pragma once

#include <map>
#include <string>

namespace cohort::detail {

/// The user value that holds the token of the job that saved a checkpoint.
inline constexpr const char* kJobTokenKey = "trainer.job";
/// The user value that holds the launcher's run id (TORCHELASTIC_RUN_ID), for people reading a manifest.
inline constexpr const char* kRunIdKey = "trainer.run_id";
/// The file in a checkpoint directory that holds the token of the job writing there.
inline constexpr const char* kJobTokenFile = ".job";

/// The launcher's run id of this job ("" when the launcher gave none).
std::string launcher_run_id();

/// What this job knows of itself in checkpoint directory `dir`.
struct JobClaim {
  std::string token;
  /// A restart whose earlier attempt wrote the token: `dir` holds a readable checkpoint with it.
  bool holds_own_checkpoint = false;
  /// A restart that found no token of an earlier attempt (missing or damaged): said in its message.
  bool token_lost = false;
};

/// Rank 0 only, holding `dir`'s lock (checkpoint/dir_lock.h): on a first attempt draws a fresh token and
/// writes it to `dir`/.job; on a restart reads it back (a fresh one when it is missing or damaged).
/// Throws cohort::Error (kind I/O) naming the file when it cannot be written.
JobClaim claim_job_token(const std::string& dir, bool restart);

/// Throws kIO when `user` (a checkpoint's values) was saved by another job than the one of `token`:
/// the load then falls back to an older checkpoint, as for any unusable one.
void check_saved_by_job(const std::map<std::string, std::string>& user, const std::string& token);

}  // namespace cohort::detail
