// One attempt of this node's worker group: start every local worker, pump their output, and watch.
// The attempt ends when all workers succeed, when one fails (the others get SIGTERM, then SIGKILL
// after --stop-timeout), when another node says to stop, or when cohortrun gets a termination signal
// (forwarded to every worker). It never returns with a worker or a worker's child still alive.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohortrun/options.h"
#include "world/worker_env.h"
#include "world/worker_process.h"

namespace cohort::detail::launch {

struct WorkerFailure {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  ExitStatus status;
  std::string time;                      // when it was seen, local time
  std::vector<std::string> stderr_tail;  // last lines of its stderr
  std::string error_message;             // from TORCHELASTIC_ERROR_FILE, when the worker wrote it
};

enum class AttemptEnd {
  kSucceeded,  // every local worker exited 0
  kFailed,     // a local worker failed; failures[0] is the first one seen
  kStopped,    // check_remote asked to stop (another node failed or the rendezvous was lost)
  kSignaled,   // cohortrun got a termination signal and forwarded it
};

struct AttemptResult {
  AttemptEnd end = AttemptEnd::kSucceeded;
  std::vector<WorkerFailure> failures;
  std::string stop_reason;                // kStopped: what check_remote returned
  int signal = 0;                         // kSignaled: the signal
  std::vector<std::string> log_failures;  // log files that could not be written (WorkerOutput)
};

struct AttemptSpec {
  const LaunchOptions* options = nullptr;
  GroupLayout layout;
  EnvVars base_env;
  std::string attempt_dir;      // attempt_N: per-local-rank log files and error files
  std::string prefix_template;  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE or ""
  /// Called every --monitor-interval while workers run; a value means "stop, for this reason".
  std::function<std::optional<std::string>()> check_remote;
};

AttemptResult run_attempt(const AttemptSpec& spec);

/// The message a worker left in its TORCHELASTIC_ERROR_FILE (torchrun's error.json), or "".
std::string read_error_file(const std::string& path);

}  // namespace cohort::detail::launch
