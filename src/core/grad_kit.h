// The gradient kit every strategy (DDP, ZeRO, and those to come) builds on: gradients that alias a
// flat buffer, hooks on the parameters' AccumulateGrad nodes that are removed with their owner, the
// end-of-backward callback, and grouping parameters by (dtype, device).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace cohort::detail {

/// A tensor over `base`'s storage with `shape`, starting at element `offset` of `base`. Autograd does
/// not see it as a view, so it can be a parameter's .grad that AccumulateGrad adds into in place and
/// that optimizers may detach_() and zero_() (LibTorch's zero_grad does both) without copying; or a
/// parameter's data inside a flat parameter buffer.
torch::Tensor flat_alias(const torch::Tensor& base, int64_t offset, c10::IntArrayRef shape);

/// Makes `alias` the gradient of `param` again when an optimizer replaced it or set it to None
/// (LibTorch 2.x zero_grad): the values it holds are copied in, None becomes zeros.
void relink_grad(torch::Tensor& param, const torch::Tensor& alias);

/// Runs `callback` once the backward pass that is running now has finished (on autograd's thread).
void at_end_of_backward(std::function<void()> callback);

/// While it lives, at_end_of_backward() on this thread collects callbacks instead of queueing them on
/// the running backward; its destructor queues them on the backward running then. A re-entrant
/// backward inside an autograd node (activation checkpointing) is a graph task of its own: without
/// this, a strategy's end-of-backward work would run when the inner pass ends, before the outer
/// pass produced the remaining gradients.
class DeferEndOfBackward {
 public:
  DeferEndOfBackward();
  ~DeferEndOfBackward();
  DeferEndOfBackward(const DeferEndOfBackward&) = delete;
  DeferEndOfBackward& operator=(const DeferEndOfBackward&) = delete;

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* outer_;
};

/// A post hook on each parameter's AccumulateGrad node calling `on_ready(index)` once autograd wrote
/// the gradient of params[index]. Destroying the set takes the hooks off the nodes, and a hook that
/// still runs afterwards (a graph that outlives the owner) does nothing: no call into freed memory.
class GradHookSet {
 public:
  GradHookSet() = default;
  GradHookSet(const std::vector<torch::Tensor>& params, std::function<void(int64_t)> on_ready);
  ~GradHookSet();
  GradHookSet(const GradHookSet&) = delete;
  GradHookSet& operator=(const GradHookSet&) = delete;
  GradHookSet(GradHookSet&& other) noexcept = default;
  GradHookSet& operator=(GradHookSet&& other) noexcept;

  struct Target;  // the callback and whether its owner still lives (shared with the hooks)

 private:
  void remove();

  std::shared_ptr<Target> target_;
  // The nodes are kept alive by us: hooks live on them, and LibTorch recreates a parameter's
  // AccumulateGrad when nobody holds it.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;  // ours (Node::add_post_hook's keys), to remove exactly those
};

/// A number standing for `owner` that an autograd node can keep (saved_data holds values, not
/// pointers): resolve(id) gives the owner while its handle lives, nullptr once it is destroyed, so a
/// graph that outlives a strategy finds out instead of calling into freed memory.
class OwnerHandle {
 public:
  explicit OwnerHandle(void* owner);
  ~OwnerHandle();
  OwnerHandle(const OwnerHandle&) = delete;
  OwnerHandle& operator=(const OwnerHandle&) = delete;
  int64_t id() const { return id_; }
  static void* resolve(int64_t id);

 private:
  int64_t id_;
};

/// Index of (dtype, device) of `t` in `groups`, appended when new: flat buffers hold one dtype on one
/// device, so parameters are bucketed per group.
using DtypeDevice = std::pair<c10::ScalarType, c10::Device>;
int64_t dtype_device_group(const torch::Tensor& t, std::vector<DtypeDevice>& groups);

}  // namespace cohort::detail
