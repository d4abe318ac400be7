// What `cohort-trace summary` computes from a merged timeline (the JSON rank 0 wrote), per rank and
// per step: compute (user spans other than "step", less DDP's and ZeRO's waits on communication inside
// them), communication (collectives' queued and transfer phases), how much of it ran under compute
// (hidden, overlap %) and how much did not (exposed), and idle time (agreement phases while nothing
// else runs: waiting for the slowest rank, named by the latest "ready" mark). Steps are a rank's user
// spans named "step", matched across ranks by their order; with none, the whole run is one step.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cohort::detail::trace {

struct StepSummary {
  int rank = 0;
  int step = -1;  // -1: the whole run
  double wall_ms = 0;
  double compute_ms = 0;
  double comm_ms = 0;
  double hidden_ms = 0;   // communication under compute
  double exposed_ms = 0;  // comm_ms - hidden_ms
  double idle_ms = 0;     // in agreement, waiting for the other ranks
  int slowest_rank = -1;  // the rank the idle time waited for most (-1: no idle time)
  double overlap_percent() const { return comm_ms > 0 ? 100.0 * hidden_ms / comm_ms : 0.0; }
};

/// Every rank's steps in a parsed trace (rank, then step order); throws cohort::Error on a file that
/// is not a cohort timeline.
std::vector<StepSummary> summarize(const nlohmann::json& trace);
/// The summary as an aligned table, or as CSV (header line first) with `csv`.
std::string format_summary(const std::vector<StepSummary>& steps, bool csv);

}  // namespace cohort::detail::trace
