// The signal that asked this process to stop, once cohort took it: the timeline's SIGTERM watcher
// hands the events over and then ends the process by that signal. A failure in between (a peer that
// stopped first) is the stop's consequence, not a fault: the Comm words its error so.
#pragma once

#include <string>

namespace cohort::detail {

/// Records `signal` (called by the thread that took it, before it acts on it).
void note_stop_signal(int signal);
/// The signal noted, else 0.
int stop_signal_taken();
/// "SIGTERM", "signal 10": how messages name it.
std::string stop_signal_name(int signal);

}  // namespace cohort::detail
