// Join (see cohort/join.h). The join allreduce of each step is one int32 vector with a slot per rank:
// 1 from a rank that still has inputs, 0 from one that has joined. Its sum says who is active, so the
// divisor, the buffer source (the lowest active rank) and the early-termination message naming the
// rank that ran out all come from that one collective, the same on every rank.
#include "cohort/join.h"

#include <torch/torch.h>

#include <string>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort {

struct Join::State {
  std::vector<Joinable*> joinables;
  Comm* comm = nullptr;
  size_t first = 0;  // the joinable that calls begin_step()/end_step(): the first with a Comm
  torch::Device device = torch::kCPU;
  bool running = false;
  torch::Tensor flags;  // the pending join allreduce's vector
  Work work;
  bool pending = false;
  JoinStep current;
  int64_t steps = 0;             // join allreduces resolved in this run
  std::vector<int> last_active;  // the active ranks of the last step any rank took
};

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

Join::Join(std::vector<Joinable*> joinables, JoinOptions options)
    : options_(options), state_(std::make_unique<State>()) {
  COHORT_CHECK_KIND(kInvalidArgument, !joinables.empty(),
                    "Join: the list of joinables is empty; pass the DistributedDataParallel "
                    "(and any JoinableOptimizer) whose steps a rank without inputs must shadow");
  for (size_t i = 0; i < joinables.size(); ++i) {
    COHORT_CHECK_KIND(kInvalidArgument, joinables[i] != nullptr, "Join: joinable #", i, " is null");
    if (state_->comm == nullptr && joinables[i]->join_comm() != nullptr) {
      state_->comm = joinables[i]->join_comm();
      state_->first = i;
      state_->device = joinables[i]->join_device();
    }
  }
  COHORT_CHECK_KIND(
      kInvalidArgument, state_->comm != nullptr, "Join: none of the ", joinables.size(),
      " joinable(s) runs collectives (join_comm() is null for all); list the DistributedDataParallel first");
  state_->joinables = std::move(joinables);
}

Join::~Join() {
  if (!state_ || !state_->running) return;
  for (auto* j : state_->joinables) j->attach_join(nullptr);
}

void Join::begin_step() {
  State& s = *state_;
  s.flags = torch::zeros({s.comm->size()}, torch::TensorOptions().dtype(torch::kInt).device(s.device));
  s.flags[s.comm->rank()].fill_(1);
  s.work = s.comm->allreduce_async(s.flags, ReduceOp::kSum);
  s.pending = true;
}

// Waits for the join allreduce and turns it into the step; throws on early termination when some rank
// has joined (on the joined ranks as well as on the others: they all hold the same vector).
const JoinStep& Join::end_step() {
  State& s = *state_;
  COHORT_CHECK_KIND(kInvalidArgument, s.pending, "Join::end_step without begin_step (a joinable's internal error)");
  s.pending = false;
  s.work.wait();
  const torch::Tensor flags = s.flags.to(torch::kCPU);
  const int* slot = flags.data_ptr<int>();
  JoinStep step;
  step.index = s.steps++;
  step.world_size = s.comm->size();
  std::vector<int> joined;
  for (int r = 0; r < step.world_size; ++r) (slot[r] > 0 ? step.active : joined).push_back(r);
  step.divisor = options_.divide_by_initial_world_size() || step.active.empty() ? step.world_size
                                                                                : int(step.active.size());
  if (!step.active.empty() && !joined.empty() && options_.throw_on_early_termination()) {
    // The ranks whose inputs differ from this rank's: the active ones on a joined rank, and the other way.
    std::vector<int> differ;
    for (int r : slot[s.comm->rank()] > 0 ? joined : step.active) differ.push_back(s.comm->world_rank(r));
    throw Error(detail::str("Join: ", rank_list(joined), " ran out of inputs after ", step.index, " step(s) while ",
                            rank_list(step.active),
                            " still had inputs; "
                            "throw_on_early_termination(true) stops every rank here (set it to false to "
                            "let the ranks with inputs go on while the others shadow their steps)"),
                ErrorKind::kDesync, differ);
  }
  if (!step.active.empty()) s.last_active = step.active;
  s.current = std::move(step);
  return s.current;
}

const JoinStep& Join::current() const { return state_->current; }

bool Join::leads(const Joinable& joinable) const { return state_->joinables[state_->first] == &joinable; }

void Join::run(const std::function<void()>& loop) {
  State& s = *state_;
  if (!options_.enable() || s.comm->size() == 1) return loop();
  COHORT_CHECK_KIND(kInvalidArgument, !s.running, "Join::run: this Join is already running (one run() at a time)");
  s.running = true;
  s.steps = 0;
  s.last_active.clear();
  s.pending = false;
  struct Detach {
    State& s;
    ~Detach() {
      for (auto* j : s.joinables) j->attach_join(nullptr);
      s.running = false;
    }
  } detach{s};
  for (auto* j : s.joinables) j->attach_join(this);
  loop();
  // This rank has joined: its vector slot stays 0 while it shadows the steps the others still take.
  while (true) {
    s.flags = torch::zeros({s.comm->size()}, torch::TensorOptions().dtype(torch::kInt).device(s.device));
    s.work = s.comm->allreduce_async(s.flags, ReduceOp::kSum);
    s.pending = true;
    const JoinStep& step = end_step();
    if (step.active.empty()) break;
    for (auto* j : s.joinables) j->join_shadow_step(step);
  }
  const int source = s.last_active.empty() ? -1 : s.last_active.front();
  for (auto* j : s.joinables) j->join_finish(source);
}

void JoinableOptimizer::join_shadow_step(const JoinStep&) { optimizer_.step(); }

}  // namespace cohort
