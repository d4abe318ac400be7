// The stop signal cohort took (stop_signal.h), and its public accessor (cohort/error.h).
#include "core/stop_signal.h"

#include <signal.h>

#include <atomic>

#include "cohort/error.h"

namespace cohort {
namespace detail {
namespace {
std::atomic<int> g_stop_signal{0};
}  // namespace

void note_stop_signal(int signal) { g_stop_signal.store(signal); }

int stop_signal_taken() { return g_stop_signal.load(); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
  }
  return "signal " + std::to_string(sig);
}

}  // namespace detail

int stop_signal() { return detail::stop_signal_taken(); }

}  // namespace cohort
