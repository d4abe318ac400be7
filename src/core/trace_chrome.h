// One rank's timeline events as Chrome-trace events (the JSON Object Format chrome://tracing and
// Perfetto read): spans become complete events (ph "X"), marks instants (ph "i"); pid is the rank,
// and each category gets rows (tid) of its own, with overlapping events spread over several rows so
// no row holds two events that overlap without nesting.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "core/trace_recorder.h"

namespace cohort::detail::trace {

/// The events of `rank`, their times moved onto rank 0's clock by adding `offset_us`, plus the
/// metadata that names the process ("rank N") and its rows: as a JSON array's text, each event
/// serialized on its own (no document of them all is ever built: 580,000 events as one nlohmann
/// document, parsed back and dumped whole, took 40 s at the end of a job), invalid UTF-8 replaced.
/// `count` gets the number of events.
std::string to_chrome_text(const std::vector<Event>& events, int rank, int64_t offset_us, size_t* count = nullptr);

}  // namespace cohort::detail::trace
