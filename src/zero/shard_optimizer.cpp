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

ShardOptimizer::ShardOptimizer(const EngineSettings& settings, StateStore& store, const EngineOptions& options,
                               std::unique_ptr<ModelParallelNorm> model_parallel)
    : settings_(settings), store_(store), model_parallel_(std::move(model_parallel)), scaler_(settings.config.fp16()) {
  std::vector<torch::Tensor> masters;
  for (int64_t g = 0; g < store_.size(); ++g) masters.push_back(store_.master(g));
  const auto& factory = options.optimizer_factory();
  // Masters on the host while the model computes on a GPU: the fused host step (host_adam.h).
  optimizer_ = factory ? factory(masters)
                       : make_inner_optimizer(settings_.config.optimizer(), masters, store_.gradients_on_host());
  COHORT_CHECK_KIND(kInvalidArgument, optimizer_ != nullptr, "EngineOptions::optimizer_factory returned no optimizer");
  create_states();
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
  unscale_gradients();
  if (settings_.config.fp16().enabled() && skipped_for_overflow()) return;
  clip_gradients();
  schedule_learning_rate();
  if (store_.masters_on_file()) {
    step_group_by_group();
  } else {
    step_all_at_once();
  }
  store_.parameters_written();  // gradients on the host: the next forward waits for them on the GPU
  store_.shards().flush();      // stage 3's shards on file: a failed write is this step's error
  unscaled_.clear();
  ++global_steps_;
  schedule_learning_rate();
  gather_parameters();
  store_.zero_gradients();
}

void ShardOptimizer::step_all_at_once() {
  if (store_.gradients_on_host()) {
    // A group at a time (the same arithmetic, as step_group_by_group says): group g's parameters go
    // up to the GPU while the host steps group g + 1.
    for (int64_t g = 0; g < store_.size(); ++g) {
      store_.master(g).mutable_grad() = unscaled_[size_t(g)];
      optimizer_->step();
      write_back(g);
    }
    return;
  }
  for (int64_t g = 0; g < store_.size(); ++g) store_.master(g).mutable_grad() = unscaled_[size_t(g)];
  optimizer_->step();
  for (int64_t g = 0; g < store_.size(); ++g) write_back(g);
}

// Masters on file: one group at a time is in memory (and the next ones being read). The inner
// optimizer steps only parameters that have a gradient, so each call updates the lent group alone,
// with the same arithmetic as one call over all groups.
void ShardOptimizer::step_group_by_group() {
  OptimizerFile& file = store_.optimizer_file();
  for_each_master(/*changes=*/true, [&](int64_t g) {
    const torch::Tensor& master = store_.master(g);
    file.lend_gradient(g);  // gradients on file: lent with the master (read ahead with it)
    master.mutable_grad() = file.holds_gradients() ? clipped(unscaled_of(g)) : unscaled_[size_t(g)];
    optimizer_->step();
    master.mutable_grad() = torch::Tensor();
    if (file.holds_gradients()) file.give_back_gradient(g);
    else unscaled_[size_t(g)] = torch::Tensor();  // its memory goes now, not after the last group
    create_state_of(g);                           // an SGD with dampening makes its buffer at its first step
    write_back(g);
  });
}

void ShardOptimizer::for_each_master(bool changes, const std::function<void(int64_t)>& fn) {
  OptimizerFile& file = store_.optimizer_file();
  for (int64_t g = 0; g < store_.size(); ++g) {
    file.prefetch_after(g);
    const bool lent = file.lent(g);  // lent already (a checkpoint's part): it stays so
    file.lend(g);
    fn(g);
    if (!lent) file.give_back(g, changes);
  }
  file.flush();  // a failed write is this step's error, not a later one's
}

// Each group's reduced gradient as fp32, divided by the loss scale: fp32 training the gradient
// itself, mixed precision an fp32 copy for this step. Gradients on file: one at a time, when lent.
void ShardOptimizer::unscale_gradients() {
  unscaled_.clear();
  clip_coefficient_ = 1.0;
  if (store_.optimizer_file().holds_gradients()) return;
  for (int64_t g = 0; g < store_.size(); ++g) unscaled_.push_back(unscaled_of(g));
}

torch::Tensor ShardOptimizer::unscaled_of(int64_t g) const {
  const double inv_scale = 1.0 / loss_scale();
  const torch::Tensor& grad = store_.reduced_gradient(g);
  torch::Tensor unscaled = grad.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/false);
  const torch::Device master_device = store_.masters_on_file() ? torch::Device(torch::kCPU) : store_.master(g).device();
  if (unscaled.device() != master_device) unscaled = unscaled.to(master_device);
  if (inv_scale != 1.0) unscaled = unscaled.is_same(grad) ? unscaled.mul_(inv_scale) : unscaled.mul(inv_scale);
  return unscaled;
}

// Gradients on file get clip_gradients()' factor when the step lends them (in memory it multiplied
// them already): the same two roundings either way.
torch::Tensor ShardOptimizer::clipped(torch::Tensor unscaled) const {
  return clip_coefficient_ < 1.0 ? unscaled.mul_(clip_coefficient_) : unscaled;
}

// Runs fn(g, unscaled gradient) for each group: from unscaled_, or each lent from the file in turn
// (read ahead offload_optimizer.buffer_count groups) and given back unchanged.
void ShardOptimizer::for_each_gradient(const std::function<void(int64_t, const torch::Tensor&)>& fn) {
  OptimizerFile& file = store_.optimizer_file();
  if (!file.holds_gradients()) {
    for (size_t g = 0; g < unscaled_.size(); ++g) fn(int64_t(g), unscaled_[g]);
    return;
  }
  for (int64_t g = 0; g < store_.size(); ++g) {
    file.prefetch_gradients_after(g);
    file.lend_gradient(g);
    fn(g, unscaled_of(g));
    file.give_back_gradient(g);
  }
}

// fp16: an overflow on any rank skips the step on every rank and lowers the loss scale.
bool ShardOptimizer::skipped_for_overflow() {
  const bool overflow = any_overflow();
  scaler_.update(overflow);
  if (!overflow) return false;
  unscaled_.clear();
  ++global_steps_;
  ++skipped_steps_;
  last_skipped_ = true;
  COHORT_INFO("fp16: gradient overflow, step ", global_steps_, " skipped; loss scale now ", loss_scale());
  store_.zero_gradients();
  return true;
}

bool ShardOptimizer::any_overflow() {
  torch::Tensor flag = torch::zeros({1}, torch::kFloat);
  for_each_gradient([&](int64_t, const torch::Tensor& grad) {
    if (!torch::isfinite(grad).all().item<bool>()) flag.fill_(1);
  });
  // Every rank must skip together: one rank's overflow skips the step everywhere.
  if (settings_.world > 1) settings_.comm->allreduce(flag, ReduceOp::kMax);
  if (model_parallel_) model_parallel_->max(flag);  // and the other tensor-parallel ranks' parts
  return flag.item<float>() > 0;
}

void ShardOptimizer::clip_gradients() {
  const double max_norm = settings_.config.gradient_clipping();
  if (!(max_norm > 0)) return;  // 0 disables clipping
  last_norm_ = std::sqrt(global_norm_squared());
  // torch.nn.utils.clip_grad_norm_'s rule, over the whole model's gradient.
  const double coefficient = max_norm / (last_norm_ + 1e-6);
  if (coefficient >= 1.0) return;
  clip_coefficient_ = coefficient;
  for (auto& grad : unscaled_) grad.mul_(coefficient);  // on file: clipped() when the step lends them
}

double ShardOptimizer::global_norm_squared() {
  torch::Tensor total = torch::zeros({1}, torch::kDouble);
  for_each_gradient([&](int64_t g, const torch::Tensor& grad) {
    if (grad.numel() == 0) return;
    total += model_parallel_ ? model_parallel_->squared_norm(g, grad) : grad.norm().to(torch::kDouble).pow(2).cpu();
  });
  // Stage 0 holds the whole gradient on every rank; the others hold disjoint shards (padding is 0).
  if (settings_.stage > 0 && settings_.world > 1) settings_.comm->allreduce(total, ReduceOp::kSum);
  if (model_parallel_) model_parallel_->sum(total);  // the other tensor-parallel ranks' parts
  return total.item<double>();
}

void ShardOptimizer::write_back_and_gather() {
  for_each_master(/*changes=*/false, [&](int64_t g) { write_back(g); });
  store_.parameters_written();
  gather_parameters();
}

void ShardOptimizer::write_back(int64_t g) {
  const torch::Tensor& master = store_.master(g);
  master.mutable_grad() = torch::Tensor();
  store_.write_parameters(g, master);
}

// Stage 1/2: every rank's updated shard to every rank (stage 3's units gather when they run).
void ShardOptimizer::gather_parameters() {
  if (!((settings_.stage == 1 || settings_.stage == 2) && settings_.world > 1)) return;
  trace::ScopedSpan span("parameter allgather", "zero", "wait");  // the timeline: stage 1/2's step-end gather
  std::vector<Work> works;
  for (int64_t g = 0; g < store_.size(); ++g)
    works.push_back(settings_.comm->allgather_async(store_.parameters(g), store_.owned_parameters(g)));
  for (auto& work : works) work.wait();
}

void ShardOptimizer::create_states() {
  if (!store_.masters_on_file()) {
    for (int64_t g = 0; g < store_.size(); ++g) create_state(*optimizer_, store_.master(g));
    return;
  }
  for_each_master(/*changes=*/false, [&](int64_t g) {
    create_state(*optimizer_, store_.master(g));
    create_state_of(g);
  });
}

// Masters on file: state the inner optimizer made for a lent master goes on file beside it.
void ShardOptimizer::create_state_of(int64_t g) {
  OptimizerFile& file = store_.optimizer_file();
  if (!file.active() || file.has_state(g)) return;
  std::vector<torch::Tensor> state;
  for (const auto& [name, tensor] : state_tensors_of(*optimizer_, store_.master(g))) state.push_back(tensor);
  file.add_state(g, std::move(state));
}

void ShardOptimizer::add_memory(MemoryReport& report) const {
  if (store_.masters_on_file()) return;  // the store counts what its swapper holds
  for (int64_t g = 0; g < store_.size(); ++g)
    for (const auto& [name, state] : state_tensors_of(*optimizer_, store_.master(g)))
      report.optimizer_bytes += tensor_bytes(state);
}

void ShardOptimizer::save(StateValues& values) const {
  values["zero.global_steps"] = double(global_steps_);
  values["zero.skipped_steps"] = double(skipped_steps_);
  values["zero.micro_steps"] = double(micro_steps_);
  // Only fp16's loss scaling skips a step: verify holds skipped_steps to 0 in any other run (hostile
  // pass 10, M1). Older checkpoints lack it.
  values["zero.fp16"] = settings_.config.fp16().enabled() ? 1.0 : 0.0;
  scaler_.save(values, "zero.loss_scaler.");
  save_hyperparameters(*optimizer_, values);
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
  window_origin_ = micro_steps_;
  scaler_.load(values, "zero.loss_scaler.");
  for (int64_t g = 0; g < store_.size(); ++g)
    set_step_count(*optimizer_, store_.master(g), int64_t(get("zero.group" + std::to_string(g) + ".step", 0)));
  schedule_learning_rate();
}

}  // namespace cohort::detail
