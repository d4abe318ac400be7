// Pipeline schedules as data: each rank's list of actions (forward or backward of a microbatch on a
// stage, and the sends and receives between stages), built by pure functions, checked before anything
// runs, printable as a steps x ranks grid, and read and written in torch.distributed.pipelining's
// action notation ("2F0", "1SEND_F3"; one CSV row per rank). No process, no tensor: the runtime
// (cohort/pipeline.h) executes a Schedule, and tests and tools inspect one.
#pragma once

#include <string>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {
namespace pipeline {

/// What an action does; the letters are torch.distributed.pipelining's computation types.
enum class ActionKind {
  kForward,       ///< F: run the stage on microbatch i (its input received, or the batch on stage 0)
  kBackward,      ///< B: backward of microbatch i on the stage (the loss on the last stage)
  kSendForward,   ///< SEND_F: send the stage's output of microbatch i to the next stage's rank
  kRecvForward,   ///< RECV_F: receive the stage's input of microbatch i from the previous stage's rank
  kSendBackward,  ///< SEND_B: send the gradient of the stage's input of microbatch i to the previous stage
  kRecvBackward,  ///< RECV_B: receive the gradient of the stage's output of microbatch i from the next stage
};

/// One step of one rank: `kind` on virtual stage `stage` (0 .. stages - 1) for microbatch `microbatch`.
struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
};
bool operator==(const Action& a, const Action& b);
inline bool operator!=(const Action& a, const Action& b) { return !(a == b); }

/// "2F0", "0B3", "1SEND_F2", "2RECV_B0" (stage, computation type, microbatch).
std::string to_string(const Action& action);
/// The inverse of to_string; a text that is not an action throws cohort::Error naming it.
Action parse_action(const std::string& text);

/// A whole schedule. Stage s runs on rank s % ranks (one stage per rank, or `stages / ranks` looped
/// virtual stages per rank for interleaved schedules, as torch.distributed.pipelining places them).
struct Schedule {
  std::string name;  ///< "gpipe", "1f1b", "interleaved", or what from_csv was given
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  std::vector<std::vector<Action>> actions;  ///< actions[rank], in the order that rank runs them
  int rank_of(int stage) const { return stage % ranks; }
};

/// GPipe: every forward, then every backward.
Schedule gpipe(int ranks, int microbatches);
/// 1F1B: warm-up forwards, then one forward one backward, then the remaining backwards; a rank holds
/// at most (ranks - rank) microbatches' activations.
Schedule one_f_one_b(int ranks, int microbatches);
/// Interleaved 1F1B (Megatron-LM's virtual pipeline): `stages_per_rank` looped stages on each rank,
/// microbatches in torch's max(1, microbatches / ranks) rounds; any count runs (rounds then differ by
/// one microbatch, where torch's ScheduleInterleaved1F1B refuses).
Schedule interleaved_1f1b(int ranks, int stages_per_rank, int microbatches);
/// By name: "gpipe", "1f1b" or "interleaved" (stages_per_rank used by "interleaved" only); another
/// name or a count below 1 throws cohort::Error naming the option and the accepted values.
Schedule make_schedule(const std::string& name, int ranks, int microbatches, int stages_per_rank = 1);

/// Adds the sends and receives between stages on different ranks to a schedule of forwards and
/// backwards only (torch's "compute_only" CSV): each receive right before the compute that consumes
/// it, each send right after the compute that produced it. The builders above return schedules so.
Schedule add_transfers(const Schedule& compute_only);

/// Where a schedule goes wrong: the action at actions[rank][index] and why.
struct ScheduleProblem {
  int rank = 0;
  int index = 0;
  std::string what;
};
/// Every problem: a send without its receive (or the other way round), a backward before its forward,
/// an action on a stage another rank owns, a microbatch missing or run twice, and ranks that would
/// wait on each other forever (a cycle, found by running the schedule). Empty: the schedule is sound.
std::vector<ScheduleProblem> find_problems(const Schedule& schedule);
/// Throws cohort::Error with the first problem and the grid with the problem marked.
void validate(const Schedule& schedule);

/// The schedule as a steps x ranks grid (one column per rank, as it runs in time when simulated),
/// with the actions named in `marks` flagged.
std::string format_grid(const Schedule& schedule, const std::vector<ScheduleProblem>& marks = {});

/// torch.distributed.pipelining's CSV: one row per rank, its actions comma separated.
std::string to_csv(const Schedule& schedule);
/// Reads to_csv's text back; `stages` and `microbatches` are found from the actions.
Schedule from_csv(const std::string& text, const std::string& name = "csv");

/// Time costs of a simulation, in any unit (a forward 1, a backward 2 by default; transfers free).
struct SimulationCosts {
  double forward = 1.0;
  double backward = 2.0;
  double transfer = 0.0;
};
/// What running a schedule costs: its makespan, the bubble fraction (idle time over ranks x makespan)
/// and, per rank, the most microbatches whose activations it holds at once.
struct Simulation {
  double makespan = 0.0;
  double bubble_fraction = 0.0;
  std::vector<int> peak_activations;
};
Simulation simulate(const Schedule& schedule, const SimulationCosts& costs = {});

}  // namespace pipeline
}  // namespace cohort
COHORT_EXPORT_END
