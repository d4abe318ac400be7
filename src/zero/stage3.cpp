// ZeRO stage 3: each sharding unit (include/cohort/fsdp.h) keeps only its parameter shard. A unit's
// call gathers its whole parameters just before it runs (prefetching the units that the last forward
// ran next, within stage3_prefetch_bucket_size and stage3_max_live_parameters) and frees them after
// (reshard_after_forward); an autograd node on each of its outputs gathers them again just before the
// unit's backward, and the reduce-scatter of its gradients frees them (engine.cpp). The root unit's
// parameters stay gathered from the start of forward to the end of backward. Freed parameters keep
// their TensorImpl (autograd saved them by reference) and only lose their storage, as DeepSpeed does,
// and the gathered buffer is emptied in place (zero/gathered_storage.h says why).
#include <torch/torch.h>

#include "cohort/activation_checkpoint.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "core/trace_recorder.h"
#include "zero/engine_impl.h"
#include "zero/gathered_storage.h"

namespace cohort::detail {
namespace {

// Identity in forward; in backward, gathers the unit's parameters before autograd reaches the
// unit's own nodes (they depend on this node's output gradient).
class GatherBeforeBackward : public torch::autograd::Function<GatherBeforeBackward> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& output,
                               int64_t engine_handle, int64_t unit) {
    ctx->saved_data["engine"] = engine_handle;
    ctx->saved_data["unit"] = unit;
    return output.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* impl = static_cast<ZeroEngineImpl*>(OwnerHandle::resolve(ctx->saved_data["engine"].toInt()));
    COHORT_CHECK_KIND(kInvalidArgument, impl != nullptr,
                      "ZeRO stage 3: backward reached a layer whose engine was destroyed after "
                      "forward; keep the engine alive until backward has finished");
    impl->before_unit_backward(ctx->saved_data["unit"].toInt());
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void ZeroEngineImpl::free_parameters(const FlatGroup& group) {
  for (int64_t index : group.layout.params) {
    auto& param = params_[size_t(index)];
    param.set_data(torch::empty({0}, param.options().requires_grad(false)));
  }
}

void ZeroEngineImpl::gather(int64_t g) {
  FlatGroup& group = groups_[size_t(g)];
  if (group.presence != FlatGroup::Presence::kFreed) return;
  if (group.gathered.defined()) buffers_.refill(group.gathered);
  else group.gathered = buffers_.empty(group.layout.padded, group.flat.options());
  if (trace::enabled()) trace::record_mark("gather launch", "zero", "launch", int64_t(group.gathered.nbytes()));
  group.gather_work = comm_->allgather_async(group.gathered, group.flat);
  group.presence = FlatGroup::Presence::kGathering;
}

void ZeroEngineImpl::ensure_gathered(int64_t g) {
  gather(g);
  FlatGroup& group = groups_[size_t(g)];
  if (group.presence == FlatGroup::Presence::kGathered) return;
  {
    trace::ScopedSpan span("gather wait", "zero", "wait");  // the timeline: a gather forward waits on
    group.gather_work.wait();
  }
  group.gather_work = Work();
  const auto& layout = group.layout;
  for (size_t k = 0; k < layout.params.size(); ++k) {
    auto& param = params_[size_t(layout.params[k])];
    const auto& shape = shapes_[size_t(layout.params[k])];
    param.set_data(group.gathered.narrow(0, layout.offsets[k], c10::multiply_integers(shape)).view(shape));
  }
  group.presence = FlatGroup::Presence::kGathered;
}

void ZeroEngineImpl::release(int64_t g) {
  FlatGroup& group = groups_[size_t(g)];
  if (group.presence == FlatGroup::Presence::kFreed) return;
  if (group.presence == FlatGroup::Presence::kGathering) group.gather_work.wait();
  group.gather_work = Work();
  free_parameters(group);
  empty_storage(group.gathered);
  group.presence = FlatGroup::Presence::kFreed;
}

void ZeroEngineImpl::release_all() {
  for (size_t g = 0; g < groups_.size(); ++g) release(int64_t(g));
}

int64_t ZeroEngineImpl::live_elements() const {
  int64_t live = 0;
  for (const auto& group : groups_)
    if (group.presence != FlatGroup::Presence::kFreed) live += group.layout.padded;
  return live;
}

// Gathers ahead the units that follow `unit` in the last forward's order (direction +1) or precede
// it (-1, for backward), as many as the prefetch bucket and the live limit allow.
void ZeroEngineImpl::prefetch_after(int64_t unit, int direction) {
  const auto& zero = config_.zero_optimization();
  const auto at = std::find(run_order_.begin(), run_order_.end(), unit);
  if (at == run_order_.end() || zero.stage3_prefetch_bucket_size() == 0) return;
  int64_t budget = zero.stage3_prefetch_bucket_size();
  int64_t ahead = 0;  // units with parameters ahead of this one, gathered or being gathered
  for (auto i = (at - run_order_.begin()) + direction; i >= 0 && i < int64_t(run_order_.size()); i += direction) {
    const int64_t g = unit_group_[size_t(run_order_[size_t(i)])];
    // In backward a unit whose reduction was launched is done; `launched` stays set until the next
    // backward, so forward must not read it (it did: no forward prefetched after the first step).
    if (g < 0 || persistent_[size_t(g)] || (in_backward_ && groups_[size_t(g)].launched)) continue;
    if (prefetch_units_ > 0 && ahead++ >= prefetch_units_) return;
    if (groups_[size_t(g)].presence != FlatGroup::Presence::kFreed) continue;
    const int64_t size = groups_[size_t(g)].layout.padded;
    if (size > budget || live_elements() + size > zero.stage3_max_live_parameters()) return;
    budget -= size;
    gather(g);
  }
}

void ZeroEngineImpl::begin_forward() {
  if (stage_ != 3) return;
  in_forward_ = true;
  this_order_.clear();
  std::fill(ran_.begin(), ran_.end(), 0);
  if (unit_group_[0] >= 0) ensure_gathered(unit_group_[0]);
  if (!run_order_.empty()) prefetch_after(0, +1);
}

void ZeroEngineImpl::end_forward() noexcept {
  if (stage_ != 3) return;
  in_forward_ = false;
  run_order_ = this_order_;
  run_order_.insert(run_order_.begin(), 0);   // the root opens every forward
  if (torch::GradMode::is_enabled()) return;  // the parameters are needed again in backward
  try {
    release_all();  // evaluation: nothing stays gathered
  } catch (const std::exception& e) {
    COHORT_WARN("ZeRO stage 3: freeing gathered parameters after forward failed: ", e.what());
  }
}

void ZeroEngineImpl::before_forward(int64_t unit) {
  const int64_t g = unit_group_[size_t(unit)];
  if (in_recomputation()) {  // activation checkpointing runs the unit again inside its backward
    if (g >= 0) ensure_gathered(g);
    return;
  }
  COHORT_CHECK_KIND(kInvalidArgument, in_forward_, "ZeRO stage 3: unit '", plan_.names[size_t(unit)],
                    "' ran outside engine.forward(); "
                    "call the model through the engine (engine.forward(...) or engine.run_forward(fn)) so the "
                    "parameters outside the units are gathered too");
  COHORT_CHECK_KIND(kInvalidArgument, !ran_[size_t(unit)] || !torch::GradMode::is_enabled(), "ZeRO stage 3: unit '",
                    plan_.names[size_t(unit)],
                    "' ran twice in one forward; a unit's gradients are reduced when "
                    "its backward ends, so it may run once per step: give each use a unit of its own, or "
                    "leave the module in its parent's unit");
  ran_[size_t(unit)] = 1;
  this_order_.push_back(unit);
  if (g < 0) return;
  ensure_gathered(g);
  prefetch_after(unit, +1);
}

torch::Tensor ZeroEngineImpl::mark_output(int64_t unit, const torch::Tensor& output) {
  const int64_t g = unit_group_[size_t(unit)];
  if (g < 0 || !output.defined() || !output.requires_grad() || !torch::GradMode::is_enabled()) return output;
  return GatherBeforeBackward::apply(output, handle_.id(), unit);
}

void ZeroEngineImpl::after_forward(int64_t unit) noexcept {
  const int64_t g = unit_group_[size_t(unit)];
  if (g < 0 || in_recomputation() || persistent_[size_t(g)]) return;
  const bool keep = torch::GradMode::is_enabled() && !plan_.units[size_t(unit)]->options().reshard_after_forward();
  if (keep) return;
  try {
    release(g);
  } catch (const std::exception& e) {
    COHORT_WARN("ZeRO stage 3: freeing unit '", plan_.names[size_t(unit)], "' after forward failed: ", e.what());
  }
}

void ZeroEngineImpl::before_unit_backward(int64_t unit) {
  const int64_t g = unit_group_[size_t(unit)];
  if (g < 0) return;
  ensure_gathered(g);
  prefetch_after(unit, -1);  // the unit backward reaches next: the one forward ran before it
}

}  // namespace cohort::detail
