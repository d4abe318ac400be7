// fork + exec of one worker (see worker_process.h). Between fork and exec only async-signal-safe
// calls are made: the launcher has threads (the TCPStore server), and only the forking thread exists
// in the child.
#include "world/worker_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::detail::launch {
namespace {

void close_fds_from(int first, int skip) {
#ifdef SYS_close_range
  if (skip > first) ::syscall(SYS_close_range, first, skip - 1, 0);
  if (::syscall(SYS_close_range, skip + 1, ~0U, 0) == 0) return;
#endif
  const long max_fd = ::sysconf(_SC_OPEN_MAX);
  for (int fd = first; fd < (max_fd > 0 && max_fd < 65536 ? max_fd : 65536); ++fd) {
    if (fd != skip) ::close(fd);
  }
}

// What the child reports through its pipe when it cannot become the program.
struct ChildError {
  int stage = 0;  // kBindStage or kExecStage
  int error = 0;  // errno
};
constexpr int kBindStage = 1, kExecStage = 2;

// A CPU mask for sched_setaffinity, made before fork (allocation is not async-signal-safe).
struct CpuMask {
  cpu_set_t* set = nullptr;
  size_t bytes = 0;
  explicit CpuMask(const std::vector<int>& cpus) {
    if (cpus.empty()) return;
    const int count = *std::max_element(cpus.begin(), cpus.end()) + 1;
    set = CPU_ALLOC(count);
    if (set == nullptr)
      throw Error("cannot allocate a CPU mask for " + std::to_string(count) + " CPUs", ErrorKind::kOutOfMemory);
    bytes = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(bytes, set);
    for (int cpu : cpus) CPU_SET_S(cpu, bytes, set);
  }
  ~CpuMask() {
    if (set != nullptr) CPU_FREE(set);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;
};

[[noreturn]] void child_fails(int report_w, int stage) {
  const ChildError report{stage, errno};
  (void)!::write(report_w, &report, sizeof report);
  ::_exit(127);
}

[[noreturn]] void exec_child(const SpawnRequest& request, char* const* argv, char* const* envp, const CpuMask& mask,
                             int out_w, int err_w, int report_w, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, 0);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  close_fds_from(3, report_w);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGXFSZ}) ::signal(sig, SIG_DFL);
  if (mask.set != nullptr && ::sched_setaffinity(0, mask.bytes, mask.set) != 0) child_fails(report_w, kBindStage);
  ::execve(request.path.c_str(), argv, envp);
  child_fails(report_w, kExecStage);
}

std::vector<char*> c_strings(const std::vector<std::string>& items) {
  std::vector<char*> pointers;
  for (const auto& item : items) pointers.push_back(const_cast<char*>(item.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

std::string ExitStatus::describe() const {
  if (exited) return "exited with code " + std::to_string(code);
  return "killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
}

std::unique_ptr<WorkerProcess> WorkerProcess::spawn(const SpawnRequest& request) {
  int out_pipe[2], err_pipe[2], report_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw Error("pipe: " + std::string(strerror(errno)), ErrorKind::kIO);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]), ::close(out_pipe[1]);
    throw Error("pipe: " + std::string(strerror(errno)), ErrorKind::kIO);
  }
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw Error("pipe: " + std::string(strerror(errno)), ErrorKind::kIO);
  }
  auto argv = c_strings(request.argv);
  auto envp = c_strings(request.envp);
  const CpuMask mask(request.cpus);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(request, argv.data(), envp.data(), mask, out_pipe[1], err_pipe[1], report_pipe[1], parent);
  }
  const int fork_error = errno;
  for (int fd : {out_pipe[1], err_pipe[1], report_pipe[1]}) ::close(fd);
  if (pid < 0) {
    for (int fd : {out_pipe[0], err_pipe[0], report_pipe[0]}) ::close(fd);
    throw Error("cannot start " + request.path + ": fork: " + strerror(fork_error), ErrorKind::kOutOfMemory);
  }
  ::setpgid(pid, pid);  // also in the child: whichever runs first, the group exists before signals
  std::unique_ptr<WorkerProcess> worker(new WorkerProcess());
  worker->pid_ = pid;
  worker->out_fd_ = out_pipe[0];
  worker->err_fd_ = err_pipe[0];
  ::fcntl(worker->out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(worker->err_fd_, F_SETFL, O_NONBLOCK);
  ChildError failed;
  ssize_t got;
  do {
    got = ::read(report_pipe[0], &failed, sizeof failed);
  } while (got < 0 && errno == EINTR);
  ::close(report_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof failed)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    worker->running_ = false;
    if (failed.stage == kBindStage) {
      throw Error("cannot bind " + request.path + " to its " + std::to_string(request.cpus.size()) +
                      " CPUs (sched_setaffinity): " + strerror(failed.error),
                  ErrorKind::kInvalidArgument);
    }
    throw Error("cannot execute " + request.path + ": " + strerror(failed.error), ErrorKind::kInvalidArgument);
  }
  return worker;
}

WorkerProcess::~WorkerProcess() {
  close_out();
  close_err();
}

void WorkerProcess::close_out() {
  if (out_fd_ >= 0) ::close(out_fd_);
  out_fd_ = -1;
}

void WorkerProcess::close_err() {
  if (err_fd_ >= 0) ::close(err_fd_);
  err_fd_ = -1;
}

bool WorkerProcess::reap() {
  if (!running_) return true;
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return false;
  running_ = false;
  if (got < 0) {  // not our child any more: treat as killed
    status_.exited = false;
    status_.signal = SIGKILL;
  } else if (WIFEXITED(status)) {
    status_.exited = true;
    status_.code = WEXITSTATUS(status);
  } else {
    status_.exited = false;
    status_.signal = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  }
  return true;
}

void WorkerProcess::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

}  // namespace cohort::detail::launch
