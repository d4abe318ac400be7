// The job's secret and the HMAC-SHA256 challenge-response built on it. Every connection to rank 0's
// store and between the control plane's ranks proves it knows the secret before its first request:
// the server sends a fresh nonce, the client answers HMAC(secret, label | nonces) and checks the
// server's answer to its own nonce, so the secret never crosses the wire (docs/security.md).
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace cohort::detail {

/// Where a job's secret comes from, strongest first, and the secret itself.
struct JobSecret {
  std::string value;
  /// "COHORT_JOB_SECRET" (a launcher's random secret), "SLURM_JOB_ID" (derived from the job and step
  /// ids: weak, anyone who can list the queue can compute it) or "run id" (derived from the run id
  /// and port: weak). The derived kinds only keep apart jobs that do not know of each other.
  std::string source;
  bool strong() const { return source == "COHORT_JOB_SECRET"; }
};

/// The shortest COHORT_JOB_SECRET taken without a warning. A stranger that records one proof (posing
/// as the store, or on the wire) can test guesses of the secret offline, millions a second: 16 random
/// hex digits (64 bits) are out of its reach, a word or a short number is not. Launchers draw 64.
inline constexpr size_t kShortJobSecret = 16;

/// The user's COHORT_JOB_SECRET in `env`, "" when it is not set. Throws cohort::Error (invalid
/// argument) when it is set but empty (it would silently mean a weak derived secret); warns once per
/// process when it is shorter than kShortJobSecret.
std::string given_job_secret(const std::map<std::string, std::string>& env);

/// The secret of this job, from `env` (COHORT_JOB_SECRET, else Slurm's ids, else `run_id` and `port`);
/// throws as given_job_secret does.
JobSecret job_secret(const std::map<std::string, std::string>& env, const std::string& run_id, int port);

/// 32 random bytes from the kernel (getrandom); throws cohort::Error if it has none to give.
std::string random_bytes(size_t count = 32);

/// A new random secret for a launcher to hand its workers (64 hex digits).
std::string new_job_secret();

/// A fresh random launch identity (32 hex digits; not a secret: checkpoints record it).
std::string new_launch_id();

/// HMAC-SHA256(secret, label | parts...) as 32 raw bytes.
std::string hmac_proof(const std::string& secret, const std::string& label, const std::string& first,
                       const std::string& second = "");

/// Compares two byte strings in time independent of where they differ.
bool same_bytes(const std::string& a, const std::string& b);

}  // namespace cohort::detail
