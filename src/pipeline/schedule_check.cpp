// Checks a schedule before anything runs: every action on a stage its rank owns, each forward and
// backward exactly once, each transfer listed where its compute needs it and matched by the other
// rank's, backwards after their forwards; and when all that holds, a run (schedule_run.h) that finds
// ranks waiting on each other forever.
#include <algorithm>
#include <map>

#include "cohort/error.h"
#include "pipeline/schedule_run.h"

namespace cohort {
namespace pipeline {
namespace {

using detail::ActionKey;
using detail::key_of;

struct Position {
  int rank = 0;
  int index = 0;
};

std::string range_text(int count) { return "0.." + std::to_string(count - 1); }

// The neighbouring stage a transfer goes to or comes from (-1: none for this kind).
int transfer_peer(const Action& action) {
  switch (action.kind) {
    case ActionKind::kSendForward:
    case ActionKind::kRecvBackward: return action.stage + 1;
    case ActionKind::kRecvForward:
    case ActionKind::kSendBackward: return action.stage - 1;
    default: return -1;
  }
}

// Why `action` cannot be on `rank` at all, or "" when it can.
std::string misplaced(const Schedule& schedule, int rank, const Action& action) {
  if (action.stage < 0 || action.stage >= schedule.stages)
    return "stage " + std::to_string(action.stage) + " is outside " + range_text(schedule.stages) +
           " (the schedule has " + std::to_string(schedule.stages) + " stages)";
  if (action.microbatch < 0 || action.microbatch >= schedule.microbatches)
    return "microbatch " + std::to_string(action.microbatch) + " is outside " + range_text(schedule.microbatches) +
           " (the schedule has " + std::to_string(schedule.microbatches) + " microbatches)";
  if (schedule.rank_of(action.stage) != rank)
    return "stage " + std::to_string(action.stage) + " belongs to rank " +
           std::to_string(schedule.rank_of(action.stage)) + " (stage % ranks), not rank " + std::to_string(rank);
  int peer = transfer_peer(action);
  if (!detail::is_compute(action.kind)) {
    if (peer < 0) return "stage 0 has no previous stage to exchange with";
    if (peer >= schedule.stages) return "the last stage has no next stage to exchange with";
    if (schedule.rank_of(peer) == rank)
      return "stages " + std::to_string(std::min(peer, action.stage)) + " and " +
             std::to_string(std::max(peer, action.stage)) + " are both on rank " + std::to_string(rank) +
             ": nothing to transfer";
  }
  return "";
}

class Checker {
 public:
  explicit Checker(const Schedule& schedule) : schedule_(schedule) {}

  std::vector<ScheduleProblem> run() {
    index_actions();
    check_coverage();
    for (const auto& [key, at] : first_) check_order(schedule_.actions[at.rank][at.index], at);
    if (problems_.empty()) check_deadlock();
    std::stable_sort(problems_.begin(), problems_.end(), [](const ScheduleProblem& a, const ScheduleProblem& b) {
      return a.rank != b.rank ? a.rank < b.rank : a.index < b.index;
    });
    return problems_;
  }

 private:
  void add(int rank, int index, std::string what) { problems_.push_back({rank, index, std::move(what)}); }

  const Position* find(const Action& action) const {
    auto found = first_.find(key_of(action));
    return found == first_.end() ? nullptr : &found->second;
  }

  void index_actions() {
    for (int r = 0; r < schedule_.ranks; ++r) {
      const auto& list = schedule_.actions[r];
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        std::string why = misplaced(schedule_, r, list[i]);
        if (!why.empty()) {
          add(r, i, why);
        } else if (const Position* earlier = find(list[i])) {
          add(r, i,
              to_string(list[i]) + " appears a second time (first at index " + std::to_string(earlier->index) + ")");
        } else {
          first_[key_of(list[i])] = {r, i};
        }
      }
    }
  }

  void check_coverage() {
    for (int s = 0; s < schedule_.stages; ++s)
      for (int m = 0; m < schedule_.microbatches; ++m)
        for (ActionKind kind : {ActionKind::kForward, ActionKind::kBackward}) {
          Action action{s, kind, m};
          int r = schedule_.rank_of(s);
          if (!find(action)) add(r, static_cast<int>(schedule_.actions[r].size()), to_string(action) + " never runs");
        }
  }

  // `needed` must be on the same rank before (`before`) or after the action at `at`.
  bool listed(const Action& needed, const Position& at, bool before) const {
    const Position* there = find(needed);
    return there && there->rank == at.rank && (before ? there->index < at.index : there->index > at.index);
  }

  // A neighbouring stage on the same rank (ranks == 1) hands over without a transfer: it must run first.
  void check_same_rank_chain(const Action& action, const Action& feeder, const Position& at, const char* what) {
    const Position* there = find(feeder);
    if (there && there->rank == at.rank && there->index > at.index)
      add(at.rank, at.index, to_string(action) + " runs before " + to_string(feeder) + ", whose " + what + " it takes");
  }

  void check_compute(const Action& a, const Position& at) {
    const int s = a.stage, m = a.microbatch;
    const bool forward = a.kind == ActionKind::kForward;
    const int upstream = forward ? s - 1 : s + 1;    // where its input comes from
    const int downstream = forward ? s + 1 : s - 1;  // where its output goes
    if (!forward && find({s, ActionKind::kForward, m}) && !listed({s, ActionKind::kForward, m}, at, true))
      add(at.rank, at.index,
          to_string(a) + " runs before " + to_string({s, ActionKind::kForward, m}) +
              " (a backward needs its forward's activations)");
    if (upstream >= 0 && upstream < schedule_.stages) {
      if (schedule_.rank_of(upstream) == at.rank) {
        check_same_rank_chain(a, {upstream, a.kind, m}, at, forward ? "output" : "gradient");
      } else {
        Action receive{s, forward ? ActionKind::kRecvForward : ActionKind::kRecvBackward, m};
        if (!listed(receive, at, true))
          add(at.rank, at.index, to_string(a) + " has no " + to_string(receive) + " before it");
      }
    }
    if (downstream >= 0 && downstream < schedule_.stages && schedule_.rank_of(downstream) != at.rank) {
      Action send{s, forward ? ActionKind::kSendForward : ActionKind::kSendBackward, m};
      if (!listed(send, at, false)) add(at.rank, at.index, to_string(a) + " is not followed by " + to_string(send));
    }
  }

  void check_order(const Action& a, const Position& at) {
    if (detail::is_compute(a.kind)) return check_compute(a, at);
    // A transfer's counterpart on the peer stage's rank: SEND_F(s) <-> RECV_F(s+1), SEND_B(s) <-> RECV_B(s-1).
    static const std::map<ActionKind, ActionKind> kMatch = {{ActionKind::kSendForward, ActionKind::kRecvForward},
                                                            {ActionKind::kRecvForward, ActionKind::kSendForward},
                                                            {ActionKind::kSendBackward, ActionKind::kRecvBackward},
                                                            {ActionKind::kRecvBackward, ActionKind::kSendBackward}};
    Action match{transfer_peer(a), kMatch.at(a.kind), a.microbatch};
    if (!find(match))
      add(at.rank, at.index,
          to_string(a) + " has no matching " + to_string(match) + " on rank " +
              std::to_string(schedule_.rank_of(match.stage)));
  }

  void check_deadlock() {
    detail::ScheduleRun run = detail::run_schedule(schedule_, SimulationCosts{1.0, 1.0, 0.0});
    for (int r = 0; r < schedule_.ranks; ++r)
      if (auto why = detail::why_stuck(schedule_, run, r)) add(r, run.stuck_at[r], *why);
  }

  const Schedule& schedule_;
  std::map<ActionKey, Position> first_;
  std::vector<ScheduleProblem> problems_;
};

std::string action_at(const Schedule& schedule, const ScheduleProblem& problem) {
  const auto& list = schedule.actions[problem.rank];
  return problem.index < static_cast<int>(list.size()) ? to_string(list[problem.index]) : "end of its list";
}

}  // namespace

std::vector<ScheduleProblem> find_problems(const Schedule& schedule) {
  if (schedule.ranks < 1 || schedule.stages < 1 || schedule.microbatches < 1 ||
      static_cast<int>(schedule.actions.size()) != schedule.ranks)
    return {{0, 0,
             "the schedule has ranks=" + std::to_string(schedule.ranks) + ", stages=" +
                 std::to_string(schedule.stages) + ", microbatches=" + std::to_string(schedule.microbatches) + " and " +
                 std::to_string(schedule.actions.size()) +
                 " action lists (expected counts of 1 or more, one list per rank)"}};
  return Checker(schedule).run();
}

void validate(const Schedule& schedule) {
  auto problems = find_problems(schedule);
  if (problems.empty()) return;
  const ScheduleProblem& first = problems.front();
  bool has_grid = static_cast<int>(schedule.actions.size()) == schedule.ranks && schedule.ranks > 0;
  std::string more = problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more, marked below)" : "";
  throw Error("pipeline schedule '" + schedule.name + "' cannot run: rank " + std::to_string(first.rank) + ", action " +
                  std::to_string(first.index) + " (" + (has_grid ? action_at(schedule, first) : "none") +
                  "): " + first.what + more + (has_grid ? "\n" + format_grid(schedule, problems) : ""),
              ErrorKind::kInvalidArgument);
}

}  // namespace pipeline
}  // namespace cohort
