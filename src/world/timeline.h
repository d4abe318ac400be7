// The timeline's life in the world (core/trace_recorder.h records, this gathers): at init, recording
// starts when COHORT_TIMELINE names a file and every rank measures its clock's offset from rank 0's
// through the store; at shutdown every rank hands its events to rank 0, which writes one Chrome-trace
// JSON file with one process row per rank (docs/timeline.md); a job stopped by SIGTERM writes it too.
#pragma once

#include <functional>

#include "cohort/comm.h"

namespace cohort::detail {

/// At init, after the world's Comm exists: reads COHORT_TIMELINE and, when recording, measures this
/// rank's clock offset from rank 0 (a collective over the store: every rank calls it).
void timeline_start(Comm& world);
/// At shutdown, before the world's Comm goes: gathers every rank's events to rank 0, which writes the
/// file (core/safe_file.h: a device, directory or link at the path is refused). A rank the control
/// plane saw die is named in a warning and left out at once; one that is merely silent, after 60 s.
/// While recording, SIGTERM aborts this rank's Comm (its training stops, the peers are told), does the
/// same (waiting at most 10 s for the others), then ends the process by SIGTERM: a job stopped from
/// outside, or one rank of it, still leaves its timeline.
void timeline_finish(Comm& world);
/// A launcher inside this process (the Trainer's self-launch) passes that SIGTERM on to its workers, so
/// they hand their events over too instead of being waited for: `stop` runs on the thread that took
/// the signal, before rank 0 gathers. An empty function removes it (before the launcher is destroyed).
void timeline_on_sigterm(std::function<void()> stop);

}  // namespace cohort::detail
