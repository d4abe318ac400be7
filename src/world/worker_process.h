// One worker process: fork + exec in its own process group, stdout and stderr on pipes, SIGKILL on
// the launcher's death (PR_SET_PDEATHSIG) so no worker outlives a killed cohortrun, and every other
// descriptor closed so workers never hold the launcher's sockets or each other's pipes. Optionally
// bound to given CPUs (cohortrun --bind-cores) before exec: every thread the program starts inherits it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/stop_signal.h"  // signal_name, for ExitStatus's callers

namespace cohort::detail::launch {

/// How a process ended.
struct ExitStatus {
  bool exited = false;  // true: ended by exit() with `code`; false: by `signal`
  int code = 0;
  int signal = 0;
  bool success() const { return exited && code == 0; }
  /// "exited with code 3" or "killed by signal 9 (SIGKILL)".
  std::string describe() const;
  /// The shell's convention: code, or 128 + signal.
  int shell_code() const { return exited ? code : 128 + signal; }
};

struct SpawnRequest {
  std::string path;               // file to execute
  std::vector<std::string> argv;  // argv[0] first
  std::vector<std::string> envp;  // KEY=VALUE
  std::vector<int> cpus;          // CPUs the worker may run on (set before exec); empty: inherited
};

class WorkerProcess {
 public:
  /// Starts the program; throws cohort::Error naming the program when fork or exec fails.
  static std::unique_ptr<WorkerProcess> spawn(const SpawnRequest& request);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  /// Non-blocking read ends of the worker's stdout and stderr; -1 once closed.
  int out_fd() const { return out_fd_; }
  int err_fd() const { return err_fd_; }
  void close_out();
  void close_err();
  /// Collects the exit status if the process ended (non-blocking); true once it has ended.
  bool reap();
  bool running() const { return running_; }
  const ExitStatus& status() const { return status_; }
  /// Sends `sig` to the worker's whole process group (its children too); a no-op when gone.
  void signal_group(int sig) const;

 private:
  WorkerProcess() = default;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool running_ = true;
  ExitStatus status_;
};

}  // namespace cohort::detail::launch
