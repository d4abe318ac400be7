// The timeline's life in the world (core/trace_recorder.h records, this gathers): at init, recording
// starts when COHORT_TIMELINE names a file and every rank measures its clock's offset from rank 0's
// through the store; at shutdown every rank hands its events to rank 0, which writes one Chrome-trace
// JSON file with one process row per rank (docs/timeline.md).
#pragma once

#include "cohort/comm.h"

namespace cohort::detail {

/// At init, after the world's Comm exists: reads COHORT_TIMELINE and, when recording, measures this
/// rank's clock offset from rank 0 (a collective over the store: every rank calls it).
void timeline_start(Comm& world);
/// At shutdown, before the world's Comm goes: gathers every rank's events to rank 0, which writes the
/// file. A rank that never sends (it died) is named in a warning and left out after a bounded wait.
void timeline_finish(Comm& world);

}  // namespace cohort::detail
