// What cohortrun_test needs to drive real launches: start a program with a clean launcher-free
// environment, collect its stdout/stderr and exit status under a deadline, read the per-rank
// environments and pid files the test workers leave, and check that no recorded process is alive.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace cohort::testing {

using Env = std::map<std::string, std::string>;

struct ProcResult {
  int code = -1;    // exit code, or -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  std::string describe() const;  // for assertion messages
};

/// A started process whose output is being collected.
struct Proc {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
};

/// This process's environment without any launcher variable (RANK, PET_*, TORCHELASTIC_*,
/// OMP_NUM_THREADS, ...), plus `extra`.
Env clean_env(const Env& extra = {});

/// Starts argv[0] (a path) with `env`.
Proc start_process(const std::vector<std::string>& argv, const Env& env);
/// Reads its output until it exits; after `timeout` it is SIGKILLed and timed_out is set.
ProcResult finish_process(Proc& proc, std::chrono::milliseconds timeout);
ProcResult run_process(const std::vector<std::string>& argv, const Env& env,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// Per-rank environments from lines "[rankN]: ENV KEY=VALUE" in `out`.
std::map<int, Env> envs_from_output(const std::string& out);
/// Per-rank environments from DIR/<rank>.env files.
std::map<int, Env> envs_from_dir(const std::string& dir);

/// A fresh empty directory under /tmp (removed by the caller with remove_tree).
std::string make_temp_dir(const std::string& prefix);
void remove_tree(const std::string& path);

/// Pids in DIR/*.pid files.
std::vector<pid_t> recorded_pids(const std::string& dir);
/// Waits up to `timeout` for all `pids` to be gone (zombies count as gone); returns those alive.
std::vector<pid_t> alive_after(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout);
/// Waits up to `timeout` until DIR holds at least `count` pid files.
bool wait_for_pid_files(const std::string& dir, size_t count, std::chrono::milliseconds timeout);

/// Number of occurrences of `needle` in `text`.
size_t count_of(const std::string& text, const std::string& needle);

/// Two network namespaces joined by a veth pair, so two "nodes" on this machine have different
/// addresses: 192.168.77.1 in a(), 192.168.77.2 in b() (only inside these namespaces, which the
/// destructor deletes). error() says which step failed (needs root and `ip netns`).
class TwoNamespaces {
 public:
  TwoNamespaces();
  ~TwoNamespaces();
  TwoNamespaces(const TwoNamespaces&) = delete;
  TwoNamespaces& operator=(const TwoNamespaces&) = delete;
  const std::string& error() const { return error_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

  /// argv that runs `cohortrun` in namespace `ns` as one of two c10d nodes meeting at a()'s address.
  static std::vector<std::string> node_argv(const std::string& ns, const std::string& cohortrun,
                                            int join_timeout_s, const std::vector<std::string>& worker);

 private:
  std::string a_, b_, error_;
};

}  // namespace cohort::testing
