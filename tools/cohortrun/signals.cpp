// Self-pipe signal handling for cohortrun (see signals.h). The handler only stores an atomic and
// writes one byte, both async-signal-safe.
#include "cohortrun/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace cohort::detail::launch {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_first_termination{0};
std::atomic<int> g_termination_count{0};
std::atomic<bool> g_child{false};

void on_signal(int sig) {
  const int saved = errno;
  if (sig == SIGCHLD) {
    g_child = true;
  } else {
    int expected = 0;
    g_first_termination.compare_exchange_strong(expected, sig);
    ++g_termination_count;
  }
  const char byte = static_cast<char>(sig);
  (void)!::write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void install_signal_handlers() {
  if (g_pipe[0] >= 0) return;
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  // A log file past the file size limit (ulimit -f) fails its write with EFBIG, which output.cpp
  // reports, instead of killing cohortrun and orphaning the workers' output.
  ::signal(SIGXFSZ, SIG_IGN);
}

int signal_fd() { return g_pipe[0]; }

bool drain_signals() {
  char buffer[64];
  while (::read(g_pipe[0], buffer, sizeof buffer) > 0) {
  }
  return g_child.exchange(false);
}

int termination_signal() { return g_first_termination.load(); }

int termination_count() { return g_termination_count.load(); }

}  // namespace cohort::detail::launch
