// The signal that asked this process to stop, once cohort took it: the timeline's SIGTERM watcher
// hands the events over and then ends the process by that signal. A failure in between (a peer that
// stopped first) is the stop's consequence, not a fault: the Comm words its error so. Also how
// messages name a signal (a stop, a worker's death).
#pragma once

#include <string>

namespace cohort::detail {

/// Records `signal` (called by the thread that took it, before it acts on it).
void note_stop_signal(int signal);
/// The signal noted, else 0.
int stop_signal_taken();
/// "SIGTERM" for 15, "signal 70" for unknown numbers: how messages name a signal.
std::string signal_name(int sig);

}  // namespace cohort::detail
