// Signals as events for cohortrun's poll loop (the self-pipe trick): SIGCHLD wakes the supervisor to
// reap workers; SIGINT, SIGTERM, SIGHUP and SIGQUIT are recorded to be forwarded to every worker.
// SIGPIPE is ignored so a closed console never kills the launcher while workers run, and SIGXFSZ so
// a log file over the file size limit is a failed write (reported), not a dead launcher.
#pragma once

namespace cohort::detail::launch {

/// Installs the handlers (idempotent).
void install_signal_handlers();

/// Read end of the self-pipe: readable when a signal arrived. Pass it to poll().
int signal_fd();

/// Empties the self-pipe. Returns true when a SIGCHLD arrived since the last call.
bool drain_signals();

/// The first termination signal received (SIGINT, SIGTERM, SIGHUP, SIGQUIT), or 0.
int termination_signal();

/// How many termination signals arrived in all (a second one means "stop now").
int termination_count();

}  // namespace cohort::detail::launch
