// Running a pipeline schedule in time, shared by simulate(), find_problems() (deadlocks) and
// format_grid() (the steps of the grid): each rank goes through its list in order; a send is issued
// when reached and never blocks, a receive is only posted, and a compute waits until what it consumes
// was sent (or, for a neighbouring stage on the same rank, computed). This is how the runtime issues
// async isend/irecv in list order and waits only before a compute (note "schedule semantics" in
// docs/pipeline.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/pipeline_schedule.h"

namespace cohort::pipeline::detail {

bool is_compute(ActionKind kind);

/// The actions a compute waits for: another rank's send (or, on the same rank, the neighbouring
/// stage's compute) and, for a backward, the stage's own forward. Empty for stage 0's forwards.
std::vector<Action> awaited_by(const Schedule& schedule, const Action& compute);

/// (stage, kind, microbatch): an action's identity in a schedule.
using ActionKey = std::tuple<int, int, int>;
ActionKey key_of(const Action& action);

struct ScheduleRun {
  std::vector<std::vector<double>> start;  ///< [rank][index]: when the action ran, -1 if it never did
  std::vector<double> busy;                ///< [rank]: time spent computing
  std::vector<int> stuck_at;               ///< [rank]: the index it waits at forever, -1 when done
  std::map<ActionKey, double> ready;       ///< when each issued send's data (each compute's result) is there
  double makespan = 0.0;
  bool stuck() const;
};

/// Runs every rank's list until all finished or none can go on.
ScheduleRun run_schedule(const Schedule& schedule, const SimulationCosts& costs);

/// Why the compute `actions[rank][index]` of a stuck run waits forever, or nullopt when nothing is
/// missing (it did run).
std::optional<std::string> why_stuck(const Schedule& schedule, const ScheduleRun& run, int rank);

}  // namespace cohort::pipeline::detail
