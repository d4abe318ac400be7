// Which checkpoints a launcher's restart continues from: only those this job saved (hostile passes 14
// S-2, 15 S-1/S-3, 16 S-1). The launcher's run id cannot tell two jobs apart (torchrun's default is
// "none", scripts reuse --rdzv-id), so a job is known by its launch: cohortrun gives its workers
// COHORT_LAUNCH_ID (drawn once per launch, the same on every node and kept across restarts), and
// torchrun's agent a log directory of its own per launch (mkdtemp), which TORCHELASTIC_ERROR_FILE
// names. Every save records the launches of the job's ranks; a restart continues the checkpoints that
// share one with it. Under a launcher that gives neither, the first attempt draws a token and writes it
// to the checkpoint directory (`.job`, under the directory's lock), and a restart reads it back: a first
// attempt that dies before writing it leaves an earlier job's token there (docs/checkpoint.md).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cohort::detail {

/// The user values that identify the job that saved a checkpoint: its launches (sorted, comma
/// separated), its token (launchers without a launch identity), the launcher's run id (for people).
inline constexpr const char* kJobLaunchKey = "trainer.launch";
inline constexpr const char* kJobTokenKey = "trainer.job";
inline constexpr const char* kRunIdKey = "trainer.run_id";
/// The file in a checkpoint directory that holds the token of the job writing there.
inline constexpr const char* kJobTokenFile = ".job";

/// The launcher's run id of this job ("" when the launcher gave none).
std::string launcher_run_id();
/// This rank's launch identity, as 16 hex digits of COHORT_LAUNCH_ID and the launcher's per-launch log
/// directory (the part of TORCHELASTIC_ERROR_FILE before "/attempt_"); "" when there is neither.
std::string launch_identity();

/// What a job is known by: its launches (every rank's launch identity, distinct, sorted), or where the
/// launcher gives none, its token.
struct JobIdentity {
  std::vector<std::string> launches;
  std::string token;
  /// The values a save records.
  std::map<std::string, std::string> values() const;
  /// Whether a checkpoint with user values `user` was saved by this job.
  bool saved(const std::map<std::string, std::string>& user) const;
};

/// What this job knows of itself in checkpoint directory `dir`.
struct JobClaim {
  JobIdentity identity;
  /// A restart: `dir` holds a readable checkpoint this job saved.
  bool holds_own_checkpoint = false;
  /// A restart without launches that found no token of an earlier attempt (missing or damaged).
  bool token_lost = false;
};

/// Rank 0 only, holding `dir`'s lock (checkpoint/dir_lock.h), with the job's `launches`. Without
/// launches: on a first attempt draws a fresh token and writes it to `dir`/.job; on a restart reads it
/// back (a fresh one when it is missing or damaged). Throws cohort::Error (kind I/O) naming the file
/// when it cannot be written.
JobClaim claim_job(const std::string& dir, bool restart, const std::vector<std::string>& launches);

/// Throws kIO when `user` (a checkpoint's values) was saved by another job than `identity`: the load
/// then falls back to an older checkpoint, as for any unusable one.
void check_saved_by_job(const std::map<std::string, std::string>& user, const JobIdentity& identity);

}  // namespace cohort::detail
