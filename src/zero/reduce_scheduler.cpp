// The ZeRO engine's reduce scheduler (reduce_scheduler.h): gradient bookkeeping in the gradient
// hooks, and the launch and retirement of each group's reduction.
#include "zero/reduce_scheduler.h"

#include <torch/torch.h>

#include <algorithm>

#include "cohort/error.h"
#include "core/check.h"
#include "core/grad_kit.h"
#include "core/trace_recorder.h"
#include "zero/step_memory_plan.h"

namespace cohort::detail {

// kMaxReductionsInFlight (step_memory_plan.h, so the planner counts with the same limit): reductions
// a rank may have launched and not finished (FSDP2 keeps one in flight while the next unit's backward
// runs).

ReduceScheduler::ReduceScheduler(const EngineSettings& settings, TrainableParameters& params, StateStore& store)
    : settings_(settings),
      params_(params),
      store_(store),
      reductions_(size_t(store.size())),
      ready_(size_t(params.size()), 0) {}

void ReduceScheduler::begin_backward() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (int64_t g = 0; g < store_.size(); ++g) {
    Reduction& reduction = reductions_[size_t(g)];
    reduction.pending = int(store_.layout(g).params.size());
    reduction.launched = false;
    // A backward that threw may have left a replica allreduce marked as started: this one starts afresh.
    reduction.replicate_target = torch::Tensor();
    reduction.replicate_work = Work();
    reduction.replicating = false;
  }
  next_launch_ = next_retire_ = in_flight_elements_ = 0;
  in_backward_ = true;
}

int64_t ReduceScheduler::gradient_ready(int64_t param) {
  if (settings_.stage <= 1) {
    // The gradient must stay the alias of flat_grad; an optimizer that set it to None (LibTorch
    // 2.x zero_grad) or replaced it gets it copied back in.
    relink_grad(params_.at(param), store_.gradient_alias(param));
  }
  if (!in_backward_) return -1;  // a backward not started by engine.backward(): nothing to reduce
  COHORT_CHECK_KIND(kInvalidArgument, !ready_[size_t(param)], "ZeRO engine: parameter '", params_.name(param),
                    "' got two gradients in one backward pass");
  ready_[size_t(param)] = 1;
  const int64_t g = store_.group_of(param);
  if (--reductions_[size_t(g)].pending > 0) return -1;
  return g;
}

void ReduceScheduler::launch_ready() {
  // Last group first, each only after all later ones (the note "launch order").
  const int64_t count = store_.size();
  while (next_launch_ < count && reductions_[size_t(count - 1 - next_launch_)].pending == 0) {
    launch(count - 1 - next_launch_);
    ++next_launch_;
  }
  retire(/*all=*/false);
}

void ReduceScheduler::finish() {
  // Parameters that got no gradient this pass count as zero; launch what is left, in order.
  for (auto& reduction : reductions_) reduction.pending = 0;
  launch_ready();
  trace::ScopedSpan span("gradient reduce wait", "zero", "wait");  // the timeline: exposed reduction
  retire(/*all=*/true);
  store_.gradients_received();
}

// Finishes launched reductions in launch order: those already complete, the oldest even when it
// is not while more than reduce_bucket_size staged elements or kMaxReductionsInFlight reductions are
// in flight (a rank ahead of its peers would otherwise stage every unit's gradients while it waits
// for them), and all of them when `all`. A finished group's staging buffer goes at once, so backward
// holds the gradients of the reductions still in flight, not of every unit. The wait on the oldest
// runs inside a gradient hook: it holds a rank that is ahead until its peers reach that reduction.
void ReduceScheduler::retire(bool all) {
  const int stage = settings_.stage;
  const int64_t count = store_.size();
  torch::NoGradGuard no_grad;
  while (next_retire_ < next_launch_) {
    const int64_t g = count - 1 - next_retire_;
    Reduction& reduction = reductions_[size_t(g)];
    GroupGradients& grads = store_.gradients(g);
    const bool over_budget = in_flight_elements_ > settings_.config.zero_optimization().reduce_bucket_size() ||
                             (stage >= 2 && next_launch_ - next_retire_ > kMaxReductionsInFlight);
    if (!all && !over_budget && !reduction.reduce_work.is_completed()) return;
    reduction.reduce_work.wait();
    if (!replicated(reduction, all || over_budget)) return;
    // In communication_data_type: back to the compute dtype (the flat gradients at stage 0, and under
    // HSDP over shard groups of one rank, whose shard is the flat gradient).
    if (reduction.comm_input.defined() && (stage == 0 || settings_.world == 1))
      grads.flat_grad.copy_(reduction.comm_input);
    if (store_.gradients_on_host()) {
      land_on_host(g);
    } else if (reduction.comm_shard.defined()) {
      grads.shard_grad = reduction.comm_shard.to(grads.flat_grad.scalar_type());
    }
    reduction.comm_input = reduction.comm_shard = torch::Tensor();
    if (stage >= 2 && !store_.gradients_on_host() && !reduction.reduce_output.is_same(grads.shard_grad))
      grads.shard_grad.add_(reduction.reduce_output);
    if (stage >= 2) store_.optimizer_file().close_gradient(g);  // on file: written behind
    if (reduction.reduce_input.defined()) in_flight_elements_ -= store_.layout(g).padded;
    reduction.reduce_input = reduction.reduce_output = reduction.replicate_target = torch::Tensor();
    reduction.reduce_work = reduction.replicate_work = Work();
    reduction.replicating = false;
    ++next_retire_;
  }
}

void ReduceScheduler::across_replicas(Reduction& reduction, const torch::Tensor& result) const {
  if (settings_.replicas > 1) reduction.replicate_target = result;
}

// The replicas hold the same shard of the gradient: the second hop carries a shard's bytes across
// hosts, not the whole gradient's (the point of HSDP). It starts when the shard group's reduction is
// done, so the next groups' reduce-scatters and backward's compute overlap it.
bool ReduceScheduler::replicated(Reduction& reduction, bool wait) {
  if (!reduction.replicate_target.defined()) return true;
  if (!reduction.replicating) {
    reduction.replicate_work = settings_.replicate->allreduce_async(reduction.replicate_target, ReduceOp::kSum);
    reduction.replicating = true;
  }
  if (!wait && !reduction.replicate_work.is_completed()) return false;
  reduction.replicate_work.wait();
  return true;
}

// Gradients on the host (offload_optimizer cpu on a GPU): the reduced shard goes down now, while
// backward goes on; finish() waits for it to land.
void ReduceScheduler::land_on_host(int64_t g) {
  const Reduction& reduction = reductions_[size_t(g)];
  const GroupGradients& grads = store_.gradients(g);
  if (settings_.stage >= 2) {
    store_.receive_gradient(g, reduction.reduce_output, reduction.accumulate);
  } else if (reduction.comm_shard.defined()) {  // stage 1 in communication_data_type
    store_.receive_gradient(g, reduction.comm_shard, /*accumulate=*/false);
  } else {  // stage 1: the reduced shard, or on one rank the flat gradient itself
    store_.receive_gradient(g, settings_.world == 1 ? grads.flat_grad : reduction.reduce_output, false);
  }
}

void ReduceScheduler::launch(int64_t g) {
  const GroupGradients& grads = store_.gradients(g);
  torch::NoGradGuard no_grad;
  reductions_[size_t(g)].launched = true;
  if (trace::enabled() && settings_.world > 1)  // the timeline: this group's gradients are complete; reduction starts
    trace::record_mark(settings_.stage == 0 ? "allreduce launch" : "reduce-scatter launch", "zero", "launch",
                       int64_t(grads.flat_grad.defined() ? grads.flat_grad.nbytes() : 0));
  if (settings_.stage <= 1) {
    launch_flat(g);
  } else {
    launch_staged(g);
  }
}

// Stage 0 allreduces the flat gradients, stage 1 reduce-scatters them.
void ReduceScheduler::launch_flat(int64_t g) {
  GroupGradients& grads = store_.gradients(g);
  Reduction& reduction = reductions_[size_t(g)];
  const int world = settings_.world;
  if (world == 1) {
    if (settings_.stage == 1 && !store_.gradients_on_host()) grads.shard_grad = grads.flat_grad;
    if (settings_.replicas > 1 && settings_.comm_dtype != grads.flat_grad.scalar_type()) {
      // HSDP over shard groups of one rank: the replicas' allreduce only, in communication_data_type
      reduction.comm_input = grads.flat_grad.to(settings_.comm_dtype).div_(settings_.replicas);
      across_replicas(reduction, reduction.comm_input);
    } else if (settings_.replicas > 1) {
      grads.flat_grad.mul_(1.0 / settings_.replicas);
      across_replicas(reduction, grads.flat_grad);
    }
    return;
  }
  if (settings_.comm_dtype != grads.flat_grad.scalar_type()) {
    launch_cast(g);
    return;
  }
  grads.flat_grad.mul_(1.0 / settings_.data_parallel());
  if (settings_.stage == 0) {
    reduction.reduce_work = settings_.comm->allreduce_async(grads.flat_grad, ReduceOp::kSum);
    across_replicas(reduction, grads.flat_grad);
  } else {
    // the reduced shard, or with gradients on the host a device buffer that land_on_host copies down
    torch::Tensor shard = torch::empty({store_.layout(g).shard}, grads.flat_grad.options());
    if (store_.gradients_on_host()) {
      reduction.reduce_output = shard;
    } else {
      grads.shard_grad = shard;
    }
    reduction.reduce_work = settings_.comm->reduce_scatter_async(shard, grads.flat_grad, ReduceOp::kSum);
    across_replicas(reduction, shard);
  }
  if (!settings_.config.zero_optimization().overlap_comm()) reduction.reduce_work.wait();
}

// Stage 0/1 with communication_data_type: the flat gradients cast, divided by the world size in that
// dtype (before the sum, as DeepSpeed), reduced; retire() casts the result back.
void ReduceScheduler::launch_cast(int64_t g) {
  const GroupGradients& grads = store_.gradients(g);
  Reduction& reduction = reductions_[size_t(g)];
  reduction.comm_input = grads.flat_grad.to(settings_.comm_dtype);
  reduction.comm_input.div_(settings_.data_parallel());
  if (settings_.stage == 0) {
    reduction.reduce_work = settings_.comm->allreduce_async(reduction.comm_input, ReduceOp::kSum);
    across_replicas(reduction, reduction.comm_input);
  } else {
    reduction.comm_shard = torch::empty({store_.layout(g).shard}, reduction.comm_input.options());
    reduction.reduce_work = settings_.comm->reduce_scatter_async(reduction.comm_shard, reduction.comm_input,
                                                                 ReduceOp::kSum);
    across_replicas(reduction, reduction.comm_shard);
  }
  if (!settings_.config.zero_optimization().overlap_comm()) reduction.reduce_work.wait();
}

// Stage 2/3: gradients are averaged over ranks by scaling first, as DDP does (the sum then cannot
// overflow where the mean fits), in the same pass that stages them.
void ReduceScheduler::launch_staged(int64_t g) {
  const GroupLayout& layout = store_.layout(g);
  GroupGradients& grads = store_.gradients(g);
  Reduction& reduction = reductions_[size_t(g)];
  const int world = settings_.data_parallel();      // the mean over every replica's shard group
  const auto options = store_.parameter_options();  // the device's, also when shard_grad is on the host
  const bool cast = settings_.comm_dtype != options.dtype() && world > 1;  // communication_data_type
  reduction.reduce_input = store_.buffers().empty(layout.padded, cast ? options.dtype(settings_.comm_dtype) : options);
  const torch::Tensor scale = torch::scalar_tensor(1.0 / world, options);
  for (size_t k = 0; k < layout.params.size(); ++k) {
    auto& grad = params_.at(layout.params[k]).mutable_grad();
    // The whole size: at stage 3 the parameter itself may already be freed (after_unit_backward).
    torch::Tensor slot = reduction.reduce_input.narrow(0, layout.offsets[k], params_.numel(layout.params[k]));
    if (!grad.defined()) {
      slot.zero_();
    } else if (world > 1 && !cast) {
      at::mul_out(slot, grad.reshape(-1), scale);
    } else {
      slot.copy_(grad.reshape(-1));
    }
    grad = torch::Tensor();  // only the shard outlives backward (stage 2/3)
  }
  reduction.reduce_input.narrow(0, layout.numel, layout.padded - layout.numel).zero_();
  if (cast) reduction.reduce_input.div_(world);  // DeepSpeed: cast, then divide in that dtype
  // The first reduction since the last step lands in the (zeroed) shard itself; later micro-steps
  // of an accumulation add theirs (and every one does in another communication_data_type). A shard
  // on file is lent until retire() has it (as zeros when clean: nothing is read).
  store_.optimizer_file().open_gradient(g, grads.shard_grad_clean);
  const bool into_shard = grads.shard_grad_clean && !cast && !store_.gradients_on_host();
  reduction.reduce_output = into_shard ? grads.shard_grad
                                       : torch::empty({layout.shard}, options.dtype(settings_.comm_dtype));
  reduction.accumulate = !grads.shard_grad_clean;  // gradients on the host: add to what landed there
  grads.shard_grad_clean = false;
  reduction.reduce_work = settings_.comm->reduce_scatter_async(reduction.reduce_output, reduction.reduce_input,
                                                               ReduceOp::kSum);
  across_replicas(reduction, reduction.reduce_output);
  in_flight_elements_ += layout.padded;
  if (!settings_.config.zero_optimization().overlap_comm()) reduction.reduce_work.wait();
}

void ReduceScheduler::add_memory(MemoryReport& report) const {
  for (const auto& reduction : reductions_)
    report.buffer_bytes += tensor_bytes(reduction.reduce_input) + tensor_bytes(reduction.reduce_output);
  if (settings_.stage >= 2)  // gradients autograd produced that are not reduced yet (inside backward)
    for (const auto& p : params_.tensors()) report.gradient_bytes += tensor_bytes(p.grad());
}

}  // namespace cohort::detail
