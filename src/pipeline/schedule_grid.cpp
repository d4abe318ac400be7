// A schedule drawn as torch.distributed.pipelining draws one (_format_pipeline_order): a row per time
// step, a column per rank. Steps come from a run with forwards and backwards of one step each
// (schedule_run.h); a rank's receives share the step of the compute they feed and its sends the step
// of the compute that produced them. Actions that never run (a deadlock) follow the last step in list
// order. Marked actions read "!!" and their row ends with "<-- " and the reason.
#include <algorithm>
#include <cmath>

#include "pipeline/schedule_run.h"

namespace cohort {
namespace pipeline {
namespace {

// The step of each action of one rank.
std::vector<int> rank_steps(const Schedule& schedule, const detail::ScheduleRun& run, int r, int first_unrun_step) {
  const auto& list = schedule.actions[r];
  const int n = static_cast<int>(list.size());
  std::vector<int> step(n, -1);
  int unrun = first_unrun_step;
  for (int i = 0; i < n; ++i)
    if (detail::is_compute(list[i].kind))
      step[i] = run.start[r][i] >= 0 ? static_cast<int>(std::lround(run.start[r][i])) : unrun++;
  // Sends join the compute before them, receives the compute after them (or the nearest one there is).
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (step[i] >= 0 && detail::is_compute(list[i].kind)) last = step[i];
    bool send = list[i].kind == ActionKind::kSendForward || list[i].kind == ActionKind::kSendBackward;
    if (step[i] < 0 && send && last >= 0) step[i] = last;
  }
  int following = -1;
  for (int i = n - 1; i >= 0; --i) {
    if (detail::is_compute(list[i].kind)) following = step[i];
    if (step[i] < 0) step[i] = following >= 0 ? following : std::max(last, 0);
  }
  return step;
}

std::string pad(const std::string& text, size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}

}  // namespace

std::string format_grid(const Schedule& schedule, const std::vector<ScheduleProblem>& marks) {
  const int ranks = static_cast<int>(schedule.actions.size());
  if (ranks == 0 || schedule.ranks < 1) return "(no ranks)\n";
  detail::ScheduleRun run = detail::run_schedule(schedule, SimulationCosts{1.0, 1.0, 0.0});
  int steps = static_cast<int>(std::lround(run.makespan));
  std::vector<std::vector<int>> step_of;
  int unrun_end = steps;
  for (int r = 0; r < ranks; ++r) {
    step_of.push_back(rank_steps(schedule, run, r, steps));
    for (int step : step_of.back()) unrun_end = std::max(unrun_end, step + 1);
  }
  // cells[step][rank]; one more row holds marks past the end of a list ("never runs").
  const int rows = unrun_end + 1;
  std::vector<std::vector<std::string>> cells(rows, std::vector<std::string>(ranks));
  std::vector<std::string> notes(rows);
  auto append = [&](int row, int r, const std::string& text) {
    cells[row][r] += (cells[row][r].empty() ? "" : " ") + text;
  };
  for (int r = 0; r < ranks; ++r) {
    const auto& list = schedule.actions[r];
    for (size_t i = 0; i < list.size(); ++i) {
      bool marked = std::any_of(marks.begin(), marks.end(), [&](const ScheduleProblem& p) {
        return p.rank == r && p.index == static_cast<int>(i);
      });
      append(step_of[r][i], r, (marked ? "!!" : "") + to_string(list[i]));
    }
  }
  for (const ScheduleProblem& mark : marks) {
    if (mark.rank < 0 || mark.rank >= ranks || mark.index < 0) continue;
    const int size = static_cast<int>(schedule.actions[mark.rank].size());
    int row = mark.index < size ? step_of[mark.rank][mark.index] : rows - 1;
    if (mark.index >= size) append(row, mark.rank, "!!missing");
    notes[row] += (notes[row].empty() ? "  <-- " : "; ") + std::string("rank ") + std::to_string(mark.rank) +
                  ", action " + std::to_string(mark.index) + ": " + mark.what;
  }
  const bool end_row_used = std::any_of(cells[rows - 1].begin(), cells[rows - 1].end(),
                                        [](const std::string& cell) { return !cell.empty(); });
  const int shown = end_row_used ? rows : rows - 1;
  const size_t label_width = std::to_string(std::max(shown - 1, 0)).size();
  std::vector<size_t> width(ranks);
  for (int r = 0; r < ranks; ++r) {
    width[r] = ("Rank " + std::to_string(r)).size();
    for (int row = 0; row < shown; ++row) width[r] = std::max(width[r], cells[row][r].size());
  }
  std::string out = std::string(label_width + 7, ' ');
  for (int r = 0; r < ranks; ++r) out += pad("Rank " + std::to_string(r), width[r] + 1);
  out.erase(out.find_last_not_of(' ') + 1);
  out += "\n";
  for (int row = 0; row < shown; ++row) {
    std::string number = std::to_string(row);
    std::string line = "Step " + std::string(label_width - number.size(), '0') + number + ": ";
    if (end_row_used && row == rows - 1) line = pad("End", label_width + 5) + ": ";
    for (int r = 0; r < ranks; ++r) line += pad(cells[row][r], width[r] + 1);
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + notes[row] + "\n";
  }
  return out;
}

}  // namespace pipeline
}  // namespace cohort
