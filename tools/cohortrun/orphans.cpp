// Finding and ending orphaned descendants of the workers (see orphans.h). Children are read from
// /proc/<pid>/stat (the parent pid is its fourth field, after the command name in parentheses,
// which may itself hold spaces and parentheses).
#include "cohortrun/orphans.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace cohort::detail::launch {
namespace {

// The parent pid in /proc/<pid>/stat, or -1 when the process is gone. read(2), not a stream: a
// process that exits between open and read makes read fail (ESRCH), which libstdc++'s filebuf turns
// into an exception that ended a launcher.
pid_t parent_pid_of(const std::string& pid) {
  const int fd = ::open(("/proc/" + pid + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buffer[1024];  // the fields up to the parent pid: the command name is at most 64 bytes
  ssize_t n;
  do {
    n = ::read(fd, buffer, sizeof(buffer));
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return -1;
  const std::string text(buffer, size_t(n));
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 4 >= text.size()) return -1;
  // ") S PPID ...": the state, then the parent.
  return static_cast<pid_t>(std::strtol(text.c_str() + close + 4, nullptr, 10));
}

bool reap_child(pid_t pid) {
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  return got == pid || (got < 0 && errno == ECHILD);
}

std::vector<pid_t> orphan_pids(const std::set<pid_t>& workers) {
  std::vector<pid_t> out;
  for (pid_t pid : child_pids())
    if (!workers.count(pid)) out.push_back(pid);
  return out;
}

void signal_orphan(pid_t pid, int sig) {
  ::kill(pid, sig);
  if (::getpgid(pid) == pid) ::kill(-pid, sig);  // the group it leads (setsid made one)
  if (sig != SIGKILL) {
    ::kill(pid, SIGCONT);
    if (::getpgid(pid) == pid) ::kill(-pid, SIGCONT);
  }
}

}  // namespace

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

std::vector<pid_t> child_pids() {
  std::vector<pid_t> children;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent* entry = ::readdir(proc)) {
    const std::string name = entry->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (parent_pid_of(name) == self) children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  ::closedir(proc);
  return children;
}

void reap_orphans(const std::set<pid_t>& workers) {
  for (pid_t pid : orphan_pids(workers)) reap_child(pid);
}

void end_orphans(const std::set<pid_t>& workers, double grace_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long>(grace_seconds * 1000));
  const auto give_up = deadline + std::chrono::seconds(5);  // one that SIGKILL cannot end (state D)
  std::set<pid_t> signalled;
  for (;;) {
    const std::vector<pid_t> left = orphan_pids(workers);
    if (left.empty() || Clock::now() >= give_up) return;
    const bool late = Clock::now() >= deadline;
    for (pid_t pid : left) {
      if (reap_child(pid)) continue;
      if (late) signal_orphan(pid, SIGKILL);
      else if (signalled.insert(pid).second) signal_orphan(pid, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace cohort::detail::launch
