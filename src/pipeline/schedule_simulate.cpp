// The schedule run in time (schedule_run.h) and what it costs: makespan, bubble fraction, and the
// activations each rank holds at most.
#include <algorithm>

#include "cohort/error.h"
#include "pipeline/schedule_run.h"

namespace cohort {
namespace pipeline {
namespace detail {

bool is_compute(ActionKind kind) { return kind == ActionKind::kForward || kind == ActionKind::kBackward; }

ActionKey key_of(const Action& action) { return {action.stage, static_cast<int>(action.kind), action.microbatch}; }

bool ScheduleRun::stuck() const {
  return std::any_of(stuck_at.begin(), stuck_at.end(), [](int index) { return index >= 0; });
}

std::vector<Action> awaited_by(const Schedule& schedule, const Action& compute) {
  std::vector<Action> awaited;
  const int s = compute.stage, m = compute.microbatch;
  if (compute.kind == ActionKind::kForward && s > 0) {
    bool same_rank = schedule.rank_of(s - 1) == schedule.rank_of(s);
    awaited.push_back({s - 1, same_rank ? ActionKind::kForward : ActionKind::kSendForward, m});
  }
  if (compute.kind == ActionKind::kBackward) {
    awaited.push_back({s, ActionKind::kForward, m});
    if (s + 1 < schedule.stages) {
      bool same_rank = schedule.rank_of(s + 1) == schedule.rank_of(s);
      awaited.push_back({s + 1, same_rank ? ActionKind::kBackward : ActionKind::kSendBackward, m});
    }
  }
  return awaited;
}

namespace {

// When `compute` can start on its rank at the earliest, or nullopt while something it needs is missing.
std::optional<double> inputs_ready(const Schedule& schedule, const ScheduleRun& run, const Action& compute,
                                   const SimulationCosts& costs) {
  double ready = 0.0;
  for (const Action& needed : awaited_by(schedule, compute)) {
    auto found = run.ready.find(key_of(needed));
    if (found == run.ready.end()) return std::nullopt;
    bool transfer = !is_compute(needed.kind);
    ready = std::max(ready, found->second + (transfer ? costs.transfer : 0.0));
  }
  return ready;
}

// Runs rank `r` from its current position as far as it can go; true when it moved.
bool advance(const Schedule& schedule, const SimulationCosts& costs, int r, std::vector<size_t>& next,
             std::vector<double>& clock, ScheduleRun& run) {
  const auto& list = schedule.actions[r];
  bool moved = false;
  while (next[r] < list.size()) {
    const Action& action = list[next[r]];
    double start = clock[r];
    if (is_compute(action.kind)) {
      auto ready = inputs_ready(schedule, run, action, costs);
      if (!ready) break;
      start = std::max(start, *ready);
      double cost = action.kind == ActionKind::kForward ? costs.forward : costs.backward;
      clock[r] = start + cost;
      run.busy[r] += cost;
      run.ready.emplace(key_of(action), clock[r]);
    } else if (action.kind == ActionKind::kSendForward || action.kind == ActionKind::kSendBackward) {
      run.ready.emplace(key_of(action), clock[r]);  // issued now; it never blocks
    }
    run.start[r][next[r]++] = start;
    moved = true;
  }
  return moved;
}

}  // namespace

ScheduleRun run_schedule(const Schedule& schedule, const SimulationCosts& costs) {
  const int ranks = static_cast<int>(schedule.actions.size());
  ScheduleRun run;
  run.busy.assign(ranks, 0.0);
  run.stuck_at.assign(ranks, -1);
  for (const auto& list : schedule.actions) run.start.emplace_back(list.size(), -1.0);
  std::vector<size_t> next(ranks, 0);
  std::vector<double> clock(ranks, 0.0);
  bool moved = true;
  while (moved) {
    moved = false;
    for (int r = 0; r < ranks; ++r) moved = advance(schedule, costs, r, next, clock, run) || moved;
  }
  for (int r = 0; r < ranks; ++r) {
    if (next[r] < schedule.actions[r].size()) run.stuck_at[r] = static_cast<int>(next[r]);
    run.makespan = std::max(run.makespan, clock[r]);
  }
  return run;
}

std::optional<std::string> why_stuck(const Schedule& schedule, const ScheduleRun& run, int rank) {
  int index = run.stuck_at[rank];
  if (index < 0) return std::nullopt;
  const Action& compute = schedule.actions[rank][index];
  for (const Action& needed : awaited_by(schedule, compute)) {
    if (run.ready.count(key_of(needed))) continue;
    int from = schedule.rank_of(needed.stage);
    std::string what = "deadlock: waits for " + to_string(needed);
    if (from == rank) return what + ", which this rank runs later";
    if (from >= static_cast<int>(run.stuck_at.size()) || run.stuck_at[from] < 0)
      return what + ", which rank " + std::to_string(from) + " never issues";
    int there = run.stuck_at[from];
    return what + " from rank " + std::to_string(from) + ", which waits at its action " + std::to_string(there) + " (" +
           to_string(schedule.actions[from][there]) + ")";
  }
  return std::nullopt;
}

}  // namespace detail

Simulation simulate(const Schedule& schedule, const SimulationCosts& costs) {
  validate(schedule);
  detail::ScheduleRun run = detail::run_schedule(schedule, costs);
  Simulation result;
  result.makespan = run.makespan;
  double busy = 0.0;
  for (double rank_busy : run.busy) busy += rank_busy;
  double capacity = schedule.ranks * run.makespan;
  result.bubble_fraction = capacity > 0.0 ? (capacity - busy) / capacity : 0.0;
  // Activations a rank holds: each (stage, microbatch) whose forward ran there and backward not yet.
  for (const auto& list : schedule.actions) {
    int held = 0, peak = 0;
    for (const Action& action : list) {
      if (action.kind == ActionKind::kForward) peak = std::max(peak, ++held);
      if (action.kind == ActionKind::kBackward) --held;
    }
    result.peak_activations.push_back(peak);
  }
  return result;
}

}  // namespace pipeline
}  // namespace cohort
