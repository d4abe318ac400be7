// The schedules as pure functions: each rank's order of forwards and backwards (GPipe, 1F1B as
// torch.distributed.pipelining's Schedule1F1B runs it, interleaved 1F1B as its
// ScheduleInterleaved1F1B orders it), then the sends and receives placed around them.
#include <algorithm>

#include "cohort/error.h"
#include "cohort/pipeline_schedule.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort {
namespace pipeline {
namespace {

void check_count(const char* option, int value) {
  COHORT_CHECK_KIND(kInvalidArgument, value >= 1, "pipeline schedule: ", option, "=", value,
                    " is below 1 (accepted: 1 or more)");
}

Schedule empty_schedule(const char* name, int ranks, int stages, int microbatches) {
  Schedule schedule;
  schedule.name = name;
  schedule.ranks = ranks;
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.actions.resize(ranks);
  return schedule;
}

Action forward(int stage, int microbatch) { return {stage, ActionKind::kForward, microbatch}; }
Action backward(int stage, int microbatch) { return {stage, ActionKind::kBackward, microbatch}; }

// Rank r's 1F1B order: min(ranks - r, m) warm-up forwards (the last rank one, the first rank `ranks`),
// then a backward and a forward in turn while forwards remain, then the remaining backwards; so rank r
// never holds more than ranks - r microbatches. Schedule1F1B._step_microbatches runs this order.
std::vector<Action> one_f_one_b_rank(int ranks, int microbatches, int r) {
  std::vector<Action> order;
  int forwards = 0, backwards = 0;
  int warmup = std::min(ranks - r, microbatches);
  while (forwards < warmup) order.push_back(forward(r, forwards++));
  while (backwards < microbatches) {
    order.push_back(backward(r, backwards++));
    if (forwards < microbatches) order.push_back(forward(r, forwards++));
  }
  return order;
}

// Microbatch groups of interleaved 1F1B: torch's rounds (max(1, m / ranks) of them) of m / rounds
// microbatches each; where rounds does not divide m (torch refuses those counts) the first m % rounds
// groups take one microbatch more.
std::vector<std::vector<int>> microbatch_groups(int ranks, int microbatches) {
  int rounds = std::max(1, microbatches / ranks);
  std::vector<std::vector<int>> groups(rounds);
  int next = 0;
  for (int g = 0; g < rounds; ++g) {
    int size = microbatches / rounds + (g < microbatches % rounds ? 1 : 0);
    for (int i = 0; i < size; ++i) groups[g].push_back(next++);
  }
  return groups;
}

// Rank r's interleaved order (Megatron-LM's virtual pipeline, "depth first" as torch orders it):
// forwards go group by group, within a group through the rank's stages in order; backwards the same
// with the stages reversed. Warm-up: the first group through all but the last local stage plus two
// forwards per rank to the last; then one forward and one backward in turn; then the rest.
std::vector<Action> interleaved_rank(int ranks, int stages_per_rank, int microbatches, int r) {
  auto groups = microbatch_groups(ranks, microbatches);
  std::vector<Action> forwards, backwards;
  for (const auto& group : groups) {
    for (int local = 0; local < stages_per_rank; ++local)
      for (int mb : group) forwards.push_back(forward(local * ranks + r, mb));
    for (int local = stages_per_rank - 1; local >= 0; --local)
      for (int mb : group) backwards.push_back(backward(local * ranks + r, mb));
  }
  const int total = stages_per_rank * microbatches;
  int warmup = std::min((stages_per_rank - 1) * static_cast<int>(groups[0].size()) + 2 * (ranks - 1 - r), total);
  std::vector<Action> order(forwards.begin(), forwards.begin() + warmup);
  for (int k = 0; k + warmup < total; ++k) {
    order.push_back(forwards[warmup + k]);
    order.push_back(backwards[k]);
  }
  order.insert(order.end(), backwards.begin() + (total - warmup), backwards.end());
  return order;
}

// What stage s's compute of microbatch m receives before it and sends after it (none between two
// stages on the same rank).
void add_receive(const Schedule& schedule, const Action& compute, std::vector<Action>& out) {
  const int s = compute.stage;
  if (compute.kind == ActionKind::kForward && s > 0 && schedule.rank_of(s - 1) != schedule.rank_of(s))
    out.push_back({s, ActionKind::kRecvForward, compute.microbatch});
  if (compute.kind == ActionKind::kBackward && s + 1 < schedule.stages &&
      schedule.rank_of(s + 1) != schedule.rank_of(s))
    out.push_back({s, ActionKind::kRecvBackward, compute.microbatch});
}

void add_send(const Schedule& schedule, const Action& compute, std::vector<Action>& out) {
  const int s = compute.stage;
  if (compute.kind == ActionKind::kForward && s + 1 < schedule.stages && schedule.rank_of(s + 1) != schedule.rank_of(s))
    out.push_back({s, ActionKind::kSendForward, compute.microbatch});
  if (compute.kind == ActionKind::kBackward && s > 0 && schedule.rank_of(s - 1) != schedule.rank_of(s))
    out.push_back({s, ActionKind::kSendBackward, compute.microbatch});
}

}  // namespace

Schedule add_transfers(const Schedule& compute_only) {
  COHORT_CHECK_KIND(kInvalidArgument, compute_only.ranks >= 1, "add_transfers: ranks=", compute_only.ranks,
                    " is below 1");
  Schedule schedule = compute_only;
  for (auto& list : schedule.actions) {
    std::vector<Action> with_transfers;
    for (const Action& action : list) {
      COHORT_CHECK_KIND(kInvalidArgument, action.kind == ActionKind::kForward || action.kind == ActionKind::kBackward,
                        "add_transfers: ", to_string(action),
                        " is a transfer already (expected forwards and backwards only)");
      add_receive(schedule, action, with_transfers);
      with_transfers.push_back(action);
      add_send(schedule, action, with_transfers);
    }
    list = std::move(with_transfers);
  }
  return schedule;
}

Schedule gpipe(int ranks, int microbatches) {
  check_count("ranks", ranks);
  check_count("microbatches", microbatches);
  Schedule schedule = empty_schedule("gpipe", ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    for (int m = 0; m < microbatches; ++m) schedule.actions[r].push_back(forward(r, m));
    for (int m = 0; m < microbatches; ++m) schedule.actions[r].push_back(backward(r, m));
  }
  return add_transfers(schedule);
}

Schedule one_f_one_b(int ranks, int microbatches) {
  check_count("ranks", ranks);
  check_count("microbatches", microbatches);
  Schedule schedule = empty_schedule("1f1b", ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) schedule.actions[r] = one_f_one_b_rank(ranks, microbatches, r);
  return add_transfers(schedule);
}

Schedule interleaved_1f1b(int ranks, int stages_per_rank, int microbatches) {
  check_count("ranks", ranks);
  check_count("stages_per_rank", stages_per_rank);
  check_count("microbatches", microbatches);
  Schedule schedule = empty_schedule("interleaved", ranks, ranks * stages_per_rank, microbatches);
  for (int r = 0; r < ranks; ++r) schedule.actions[r] = interleaved_rank(ranks, stages_per_rank, microbatches, r);
  return add_transfers(schedule);
}

Schedule make_schedule(const std::string& name, int ranks, int microbatches, int stages_per_rank) {
  check_count("stages_per_rank", stages_per_rank);
  if (name == "gpipe") return gpipe(ranks, microbatches);
  if (name == "1f1b") return one_f_one_b(ranks, microbatches);
  if (name == "interleaved") return interleaved_1f1b(ranks, stages_per_rank, microbatches);
  throw Error("pipeline schedule=" + cohort::detail::printable(name) + " is not one of gpipe, 1f1b, interleaved",
              ErrorKind::kInvalidArgument);
}

}  // namespace pipeline
}  // namespace cohort
