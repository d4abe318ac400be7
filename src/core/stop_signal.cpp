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

std::string stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace detail

int stop_signal() { return detail::stop_signal_taken(); }

}  // namespace cohort
