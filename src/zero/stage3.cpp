// ZeRO stage 3: each unit (a child of the Sequential) keeps only its parameter shard. Forward
// gathers a unit's whole parameters just before it runs (prefetching the next unit's) and frees
// them after; an autograd node on the unit's output gathers them again just before the unit's
// backward. Freed parameters keep their TensorImpl (autograd saved them by reference) and only
// lose their storage, as DeepSpeed does with `param.data = empty`.
#include <torch/torch.h>

#include "cohort/error.h"
#include "core/trace_recorder.h"
#include "zero/engine_impl.h"

namespace cohort::detail {
namespace {

// Identity in forward; in backward, gathers the unit's parameters before autograd reaches the
// unit's own nodes (they depend on this node's output gradient).
class GatherBeforeBackward : public torch::autograd::Function<GatherBeforeBackward> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& output,
                               int64_t engine_handle, int64_t group) {
    ctx->saved_data["engine"] = engine_handle;
    ctx->saved_data["group"] = group;
    return output.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* impl = static_cast<ZeroEngineImpl*>(OwnerHandle::resolve(ctx->saved_data["engine"].toInt()));
    COHORT_CHECK(impl != nullptr, "ZeRO stage 3: backward reached a layer whose engine was destroyed after "
                                  "forward; keep the engine alive until backward has finished");
    impl->before_unit_backward(ctx->saved_data["group"].toInt());
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
  group.gathered = torch::empty({group.layout.padded}, group.flat.options());
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
  group.gathered = torch::Tensor();
  group.presence = FlatGroup::Presence::kFreed;
}

torch::Tensor ZeroEngineImpl::forward_units(torch::Tensor x) {
  const size_t units = sequential_->size();
  auto next_group_after = [this, units](size_t unit) -> int64_t {
    for (size_t u = unit + 1; u < units; ++u)
      if (unit_group_[u] >= 0) return unit_group_[u];
    return -1;
  };
  for (size_t u = 0; u < units; ++u) {
    const int64_t g = unit_group_[u];
    if (g >= 0) {
      ensure_gathered(g);
      const int64_t next = next_group_after(u);
      if (next >= 0) gather(next);  // prefetch: it travels while this unit computes
    }
    x = sequential_->begin()[int64_t(u)].forward(x);
    if (g >= 0) {
      if (torch::GradMode::is_enabled() && x.requires_grad())
        x = GatherBeforeBackward::apply(x, handle_.id(), g);
      release(g);
    }
  }
  return x;
}

void ZeroEngineImpl::before_unit_backward(int64_t g) {
  ensure_gathered(g);
  // Prefetch the unit that backward reaches next (the previous one with parameters).
  for (int64_t p = g - 1; p >= 0; --p) {
    if (groups_[size_t(p)].launched) continue;
    gather(p);
    break;
  }
}

}  // namespace cohort::detail
