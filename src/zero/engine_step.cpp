// The ZeRO engine's optimizer step at the accumulation boundary: unscale, overflow check across
// ranks, global-norm clipping, the inner optimizer on this rank's shards, the LR schedule, and the
// gather of updated parameters (see engine_impl.h).
#include <torch/torch.h>

#include <cmath>

#include "core/log.h"
#include "core/trace_recorder.h"
#include "zero/engine_impl.h"
#include "zero/inner_optimizer.h"

namespace cohort::detail {

torch::Tensor ZeroEngineImpl::gradient_of(const FlatGroup& group) {
  if (stage_ == 0) return group.flat_grad;
  if (stage_ == 1 && world_ == 1) return group.flat_grad;
  return group.shard_grad;
}

double ZeroEngineImpl::next_lr() const {
  const auto& scheduler = config_.scheduler();
  if (scheduler.type() == SchedulerType::kNone) return learning_rate(*optimizer_);
  // DeepSpeed steps its scheduler after each optimizer step that was not skipped, starting from
  // last_batch_iteration -1: the k-th update (from 0) runs with the rate of iteration k - 1.
  return warmup_lr(scheduler, global_steps_ - skipped_steps_ - 1);
}

void ZeroEngineImpl::step() {
  const bool boundary = at_boundary();
  ++micro_steps_;
  if (!boundary) return;
  torch::NoGradGuard no_grad;
  last_skipped_ = false;
  const double inv_scale = 1.0 / loss_scale();
  for (auto& group : groups_) {
    torch::Tensor grad = gradient_of(group);
    // fp32 training: the gradient itself; mixed precision or offload: an fp32 copy for this step.
    torch::Tensor g = grad.to(group.master.options(), /*non_blocking=*/false, /*copy=*/false);
    if (inv_scale != 1.0) g = g.is_same(grad) ? g.mul_(inv_scale) : g.mul(inv_scale);
    group.master.mutable_grad() = g;
  }
  if (config_.fp16().enabled()) {
    const bool overflow = any_overflow();
    scaler_.update(overflow);
    if (overflow) {
      ++global_steps_;
      ++skipped_steps_;
      last_skipped_ = true;
      COHORT_INFO("fp16: gradient overflow, step ", global_steps_, " skipped; loss scale now ", loss_scale());
      zero_gradients();
      return;
    }
  }
  const double max_norm = config_.gradient_clipping();
  if (max_norm > 0) {
    last_norm_ = std::sqrt(global_norm_squared());
    // torch.nn.utils.clip_grad_norm_'s rule, over the whole model's gradient.
    const double coefficient = max_norm / (last_norm_ + 1e-6);
    if (coefficient < 1.0)
      for (auto& group : groups_) group.master.mutable_grad().mul_(coefficient);
  }
  if (config_.scheduler().type() != SchedulerType::kNone) set_learning_rate(*optimizer_, next_lr());
  optimizer_->step();
  ++global_steps_;
  if (config_.scheduler().type() != SchedulerType::kNone) set_learning_rate(*optimizer_, next_lr());
  write_back_and_gather();
  zero_gradients();
}

bool ZeroEngineImpl::any_overflow() {
  torch::Tensor flag = torch::zeros({1}, torch::kFloat);
  for (const auto& group : groups_) {
    const auto& g = group.master.grad();
    if (!torch::isfinite(g).all().item<bool>()) flag.fill_(1);
  }
  // Every rank must skip together: one rank's overflow skips the step everywhere.
  if (world_ > 1) comm_->allreduce(flag, ReduceOp::kMax);
  return flag.item<float>() > 0;
}

double ZeroEngineImpl::global_norm_squared() {
  torch::Tensor total = torch::zeros({1}, torch::kDouble);
  for (const auto& group : groups_) {
    const auto& g = group.master.grad();
    if (g.numel() > 0) total += g.norm().to(torch::kDouble).pow(2).cpu();
  }
  // Stage 0 holds the whole gradient on every rank; the others hold disjoint shards (padding is 0).
  if (stage_ > 0 && world_ > 1) comm_->allreduce(total, ReduceOp::kSum);
  return total.item<double>();
}

void ZeroEngineImpl::write_back_and_gather() {
  trace::ScopedSpan span("parameter allgather", "zero", "wait");  // the timeline: stage 1/2's step-end gather
  std::vector<Work> works;
  for (auto& group : groups_) {
    group.master.mutable_grad() = torch::Tensor();
    auto [begin, end] = group.layout.owned(rank_);
    torch::Tensor owned = stage_ == 0 || stage_ == 3 ? group.flat : group.flat.narrow(0, begin, end - begin);
    if (owned.data_ptr() != group.master.data_ptr()) owned.copy_(group.master);
    if (stage_ == 1 || stage_ == 2) {
      if (world_ > 1) works.push_back(comm_->allgather_async(group.flat, owned));
    }
  }
  for (auto& work : works) work.wait();
}

void ZeroEngineImpl::zero_gradients() {
  for (auto& group : groups_) {
    group.master.mutable_grad() = torch::Tensor();
    if (group.flat_grad.defined()) group.flat_grad.zero_();
    if (stage_ >= 2) {
      group.shard_grad.zero_();
      group.shard_grad_clean = true;
    } else {
      group.shard_grad = torch::Tensor();  // stage 1: the reduced shard lives for one step only
    }
  }
}

}  // namespace cohort::detail
