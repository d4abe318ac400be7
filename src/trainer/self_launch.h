// Lightning's subprocess launcher for cohort: a Trainer with devices > 1 in a program started
// without a launcher re-executes the same program with the same arguments as local ranks 1..n-1,
// with torchrun's environment (the variables cohortrun sets, world/worker_env.h), and becomes rank
// 0 itself. Their output comes through prefixed "[rankN]: "; a worker that fails stops the others
// and its message becomes the job's error; workers die with this process (PR_SET_PDEATHSIG) and are
// stopped (SIGTERM with SIGCONT, then SIGKILL) and reaped when it fails, so none is left behind.
// devices is checked against the node's cores and memory before the first fork. Under a launcher
// nothing is started, and the launcher's world is checked against devices x num_nodes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "world/launch_env.h"
#include "world/log_prefix.h"
#include "world/worker_process.h"

namespace cohort::detail {

/// Throws cohort::Error when the launcher's world does not match devices (0: "auto") x num_nodes,
/// naming both; num_nodes > 1 without a launcher is refused too.
void check_launch_matches(const LaunchEnv& env, int devices, int64_t num_nodes);

/// Whether a worker's failure ("rank 1 exited with code 1: error: [rank 1/2] X") reports the same
/// error as `own` ("[rank 0/2] X"): the same text but for the ranks it names (its prefix, and each
/// "rank N: " a load's agreement puts before another rank's problem).
bool same_refusal(const std::string& failure, const std::string& own);

class SelfLauncher {
 public:
  /// Starts workers 1..devices-1 when `env` has no launcher and devices > 1; else nothing.
  SelfLauncher(const LaunchEnv& env, int devices);
  ~SelfLauncher();
  SelfLauncher(const SelfLauncher&) = delete;
  SelfLauncher& operator=(const SelfLauncher&) = delete;

  bool active() const { return !workers_.empty(); }
  /// The first failed worker's message ("rank 1 exited with code 1: error: ..."), waiting up to
  /// `wait` for one to fail; "" when none did.
  std::string failure(std::chrono::milliseconds wait);
  /// Calls `hook` with the first failed worker's message when one fails (at once if one already has),
  /// on the thread that watches the workers: rank 0's Comm is aborted with it, so that this process
  /// stops waiting for a rank whose process has ended.
  void on_failure(std::function<void(const std::string&)> hook);
  /// Sends the workers SIGTERM and SIGCONT (a stopped one then dies too); the destructor, on an
  /// error, SIGKILLs those still running after kStopGrace and reaps them.
  void stop_workers();
  /// How long a failing job waits for a worker that failed first to be seen exiting (its message is
  /// the job's error); a worker that failed has exited by the time this process notices, one that is
  /// stopped or hung never will.
  static constexpr std::chrono::seconds kFailureWait{3};
  static constexpr std::chrono::seconds kStopGrace{5};

 private:
  struct Worker {
    std::unique_ptr<launch::WorkerProcess> process;
    int rank = 0;
    std::string prefix;
    launch::LineSplitter out, err;
    launch::TailBuffer tail{5};
    /// Its "error: " lines, printed when it ends unless they are the job's failure, which rank 0 says
    /// (a refusal every rank meets was printed once per rank: hostile pass 16, m-1).
    std::vector<std::string> errors;
    bool ended = false;
  };
  void start(int devices);
  void pump();
  bool forward(Worker& worker, int fd, launch::LineSplitter& splitter, bool is_err);
  void on_exit(Worker& worker);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string failure_;
  std::function<void(const std::string&)> failure_hook_;
  bool stopping_ = false;
  std::thread pump_;
};

}  // namespace cohort::detail
