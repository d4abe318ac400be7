// The reducer inside a cohort::Join (see the note in reducer.h): a synchronized backward is one join
// step on a rank with inputs; a rank without shadows it with zeros (PyTorch's _DDPJoinHook), and at
// the end every rank takes the parameters and buffers of the lowest rank that took the last step.
#include <torch/torch.h>

#include "comm/coalesced.h"
#include "ddp/reducer.h"

namespace cohort::detail {

torch::Device Reducer::device() const {
  for (const auto& p : module_->parameters()) return p.device();
  return torch::kCPU;
}

void Reducer::attach_join(Join* join, JoinRole role) {
  join_ = join;
  join_role_ = role;
  join_pending_ = false;
}

void Reducer::begin_join_step() {
  scale_ = 1.0 / comm_->size();
  divisor_ = comm_->size();
  buffer_source_ = 0;
  if (join_ == nullptr) return;
  join_pending_ = true;
  // Note "join wait" in reducer.h: with the world size as divisor and no early termination to raise,
  // the buckets need nothing from the join allreduce: it starts with the first bucket and is waited for
  // at the end of backward.
  const JoinOptions& options = join_->options();
  join_deferred_ = join_role_ == JoinRole::kLeads && options.divide_by_initial_world_size() &&
                   !options.throw_on_early_termination();
  join_launched_ = join_role_ == JoinRole::kLeads && !join_deferred_;
  if (join_launched_) join_->begin_step();
}

void Reducer::launch_join_step() {
  if (join_launched_) return;
  join_launched_ = true;
  join_->begin_step();
}

void Reducer::resolve_join_step() {
  if (join_deferred_) launch_join_step();
  join_pending_ = false;
  join_deferred_ = false;
  const JoinStep& step = join_role_ == JoinRole::kLeads ? join_->end_step() : join_->current();
  scale_ = 1.0 / step.divisor;
  divisor_ = step.divisor;
  // Rank 0 may have joined: its buffers no longer move, so an active rank's go out.
  buffer_source_ = step.active.front();
}

void Reducer::shadow_step(const JoinStep& step) {
  if (comm_->size() == 1) return;
  torch::NoGradGuard no_grad;
  // finalize_backward's collectives in its order: the one rebuild (note "first step" in reducer.h),
  // the buckets (note "bucket order"), the buffers.
  if (!rebuilt_) rebuild_buckets_once();
  // The gradients become the bucket views again (an optimizer may have replaced or dropped them) and
  // hold zeros: this rank adds nothing to the sums. Afterwards they hold the step's averaged gradient,
  // as on every rank, for a JoinableOptimizer after this DDP.
  for (size_t i = 0; i < params_.size(); ++i) link_gradient(int64_t(i));
  // A comm hook runs on the zeros too (PyTorch's _match_all_reduce_for_bwd_pass), so its collectives
  // and its step count stay in line with the ranks that still train.
  for (auto& bucket : buckets_) bucket.flat.zero_();
  scale_ = 1.0 / step.divisor;
  divisor_ = step.divisor;
  for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
  wait_launched(buckets_.size());
  std::fill(touched_.begin(), touched_.end(), 0);
  if (options_.broadcast_buffers() && !buffers_.empty()) broadcast_coalesced(*comm_, buffers_, step.active.front());
}

void Reducer::sync_from(int source) {
  if (source < 0 || comm_->size() == 1) return;
  broadcast_coalesced(*comm_, module_->parameters(), source);
  if (!buffers_.empty()) broadcast_coalesced(*comm_, buffers_, source);
}

}  // namespace cohort::detail
