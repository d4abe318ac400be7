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
/// metadata that names the process ("rank N") and its rows.
nlohmann::json to_chrome(const std::vector<Event>& events, int rank, int64_t offset_us);

}  // namespace cohort::detail::trace
