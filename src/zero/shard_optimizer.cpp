// The ZeRO engine's optimizer step (shard_optimizer.h), and its counters in a checkpoint.
#include "zero/shard_optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "core/trace_recorder.h"
#include "zero/inner_optimizer.h"

namespace cohort::detail {

ShardOptimizer::ShardOptimizer(const EngineSettings& settings, StateStore& store, const EngineOptions& options)
    : settings_(settings), store_(store), scaler_(settings.config.fp16()) {
  std::vector<torch::Tensor> masters;
  for (int64_t g = 0; g < store_.size(); ++g) masters.push_back(store_.master(g));
  const auto& factory = options.optimizer_factory();
  optimizer_ = factory ? factory(masters) : make_inner_optimizer(settings_.config.optimizer(), masters);
  COHORT_CHECK_KIND(kInvalidArgument, optimizer_ != nullptr, "EngineOptions::optimizer_factory returned no optimizer");
  for (const auto& master : masters) create_state(*optimizer_, master);
  schedule_learning_rate();
}

double ShardOptimizer::next_lr() const {
  const auto& scheduler = settings_.config.scheduler();
  if (scheduler.type() == SchedulerType::kNone) return learning_rate(*optimizer_);
  // DeepSpeed steps its scheduler after each optimizer step that was not skipped, starting from
  // last_batch_iteration -1: the k-th update (from 0) runs with the rate of iteration k - 1.
  return warmup_lr(scheduler, global_steps_ - skipped_steps_ - 1);
}

void ShardOptimizer::schedule_learning_rate() {
  if (settings_.config.scheduler().type() != SchedulerType::kNone) set_learning_rate(*optimizer_, next_lr());
}

void ShardOptimizer::step() {
  const bool boundary = at_boundary();
  ++micro_steps_;
  if (!boundary) return;
  torch::NoGradGuard no_grad;
  last_skipped_ = false;
  unscale_into_masters();
  if (settings_.config.fp16().enabled() && skipped_for_overflow()) return;
  clip_gradients();
  schedule_learning_rate();
  optimizer_->step();
  ++global_steps_;
  schedule_learning_rate();
  write_back_and_gather();
  store_.zero_gradients();
}

void ShardOptimizer::unscale_into_masters() {
  const double inv_scale = 1.0 / loss_scale();
  for (int64_t g = 0; g < store_.size(); ++g) {
    const torch::Tensor& grad = store_.reduced_gradient(g);
    const torch::Tensor& master = store_.master(g);
    // fp32 training: the gradient itself; mixed precision or offload: an fp32 copy for this step.
    torch::Tensor unscaled = grad.to(master.options(), /*non_blocking=*/false, /*copy=*/false);
    if (inv_scale != 1.0) unscaled = unscaled.is_same(grad) ? unscaled.mul_(inv_scale) : unscaled.mul(inv_scale);
    master.mutable_grad() = unscaled;
  }
}

// fp16: an overflow on any rank skips the step on every rank and lowers the loss scale.
bool ShardOptimizer::skipped_for_overflow() {
  const bool overflow = any_overflow();
  scaler_.update(overflow);
  if (!overflow) return false;
  ++global_steps_;
  ++skipped_steps_;
  last_skipped_ = true;
  COHORT_INFO("fp16: gradient overflow, step ", global_steps_, " skipped; loss scale now ", loss_scale());
  store_.zero_gradients();
  return true;
}

bool ShardOptimizer::any_overflow() {
  torch::Tensor flag = torch::zeros({1}, torch::kFloat);
  for (int64_t g = 0; g < store_.size(); ++g) {
    const auto& grad = store_.master(g).grad();
    if (!torch::isfinite(grad).all().item<bool>()) flag.fill_(1);
  }
  // Every rank must skip together: one rank's overflow skips the step everywhere.
  if (settings_.world > 1) settings_.comm->allreduce(flag, ReduceOp::kMax);
  return flag.item<float>() > 0;
}

void ShardOptimizer::clip_gradients() {
  const double max_norm = settings_.config.gradient_clipping();
  if (!(max_norm > 0)) return;  // 0 disables clipping
  last_norm_ = std::sqrt(global_norm_squared());
  // torch.nn.utils.clip_grad_norm_'s rule, over the whole model's gradient.
  const double coefficient = max_norm / (last_norm_ + 1e-6);
  if (coefficient < 1.0)
    for (int64_t g = 0; g < store_.size(); ++g) store_.master(g).mutable_grad().mul_(coefficient);
}

double ShardOptimizer::global_norm_squared() {
  torch::Tensor total = torch::zeros({1}, torch::kDouble);
  for (int64_t g = 0; g < store_.size(); ++g) {
    const auto& grad = store_.master(g).grad();
    if (grad.numel() > 0) total += grad.norm().to(torch::kDouble).pow(2).cpu();
  }
  // Stage 0 holds the whole gradient on every rank; the others hold disjoint shards (padding is 0).
  if (settings_.stage > 0 && settings_.world > 1) settings_.comm->allreduce(total, ReduceOp::kSum);
  return total.item<double>();
}

void ShardOptimizer::write_back_and_gather() {
  trace::ScopedSpan span("parameter allgather", "zero", "wait");  // the timeline: stage 1/2's step-end gather
  const bool gather = (settings_.stage == 1 || settings_.stage == 2) && settings_.world > 1;
  std::vector<Work> works;
  for (int64_t g = 0; g < store_.size(); ++g) {
    const torch::Tensor& master = store_.master(g);
    master.mutable_grad() = torch::Tensor();
    torch::Tensor owned = store_.owned_parameters(g);
    if (owned.data_ptr() != master.data_ptr()) owned.copy_(master);
    if (gather) works.push_back(settings_.comm->allgather_async(store_.parameters(g), owned));
  }
  for (auto& work : works) work.wait();
}

void ShardOptimizer::create_states() {
  for (int64_t g = 0; g < store_.size(); ++g) create_state(*optimizer_, store_.master(g));
}

void ShardOptimizer::add_memory(MemoryReport& report) const {
  for (int64_t g = 0; g < store_.size(); ++g)
    for (const auto& [name, state] : state_tensors_of(*optimizer_, store_.master(g)))
      report.optimizer_bytes += tensor_bytes(state);
}

void ShardOptimizer::save(StateValues& values) const {
  values["zero.global_steps"] = double(global_steps_);
  values["zero.skipped_steps"] = double(skipped_steps_);
  values["zero.micro_steps"] = double(micro_steps_);
  scaler_.save(values, "zero.loss_scaler.");
  for (int64_t g = 0; g < store_.size(); ++g)
    values["zero.group" + std::to_string(g) + ".step"] = double(step_count(*optimizer_, store_.master(g)));
}

void ShardOptimizer::load(const StateValues& values) {
  auto get = [&](const std::string& key, double fallback) {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  };
  global_steps_ = int64_t(get("zero.global_steps", 0));
  skipped_steps_ = int64_t(get("zero.skipped_steps", 0));
  micro_steps_ = int64_t(get("zero.micro_steps", 0));
  scaler_.load(values, "zero.loss_scaler.");
  for (int64_t g = 0; g < store_.size(); ++g)
    set_step_count(*optimizer_, store_.master(g), int64_t(get("zero.group" + std::to_string(g) + ".step", 0)));
  schedule_learning_rate();
}

}  // namespace cohort::detail
