// The DDP reducer: owns the gradient buckets and the autograd hooks. Each parameter's gradient is a
// view into a flat bucket; when the last gradient of a bucket is accumulated, the bucket is averaged
// across ranks with an async allreduce while backward goes on; a callback at the end of backward
// waits for the buckets, checks for parameters that got no gradient, and copies rank 0's buffers.
//
// Note "first step": a process's first synchronized backward launches nothing while it runs; it
// records the order gradients arrive in, and at its end the buckets are rebuilt in rank 0's order and
// reduced. So every step reduces in that one layout, a process's first included. Why: on Gloo at more
// than 2 ranks the sum of an element depends on its place in its bucket (the ring's chunks), so a job
// resumed from a checkpoint, whose first step would otherwise reduce in the initial layout (reverse
// registration order), would end with other bits than one never interrupted. The cost: that one step
// per process does not overlap communication with backward. (Saving the layout in checkpoints would
// fix only the loops that add DDP to their checkpoint, and make old checkpoints another model's.)
//
// Note "bucket order": every rank must launch the same buckets in the same order, or collectives pair
// up wrongly. Buckets come from assign_buckets() on inputs that are equal on every rank (parameter
// shapes are checked at construction; the rebuild order is rank 0's, broadcast), and a bucket is only
// launched after all buckets before it.
//
// With a comm hook (cohort/comm_hooks.h) a bucket's launch runs the hook instead of the allreduce, on
// the unscaled local gradients with the step's divisor; its later stages (PowerSGD's second and third
// collectives) run at the end of backward in wait_launched(), bucket by bucket in order, the same on
// every rank (note "bucket order").
//
// Inside a cohort::Join (reducer_join.cpp) each synchronized backward is one join step: its join
// allreduce starts with the backward; a rank out of inputs runs shadow_step() per step instead.
//
// Note "join wait": the step's divisor and buffer source come from the join allreduce. With PyTorch's
// defaults (divide by the initial world size, no early termination) the divisor is the world size
// anyway, so the join allreduce starts just before the first bucket (where the ranks meet anyway;
// started earlier, a rank waited in it for a slower peer while its own backward needed the CPU) and is
// waited for at the end of backward, before the buffers (their source). A divisor of the active
// ranks, or throw_on_early_termination (which must raise before any bucket a joined rank would not
// match), waits before the first bucket launches: backward stops there until every rank has begun it.
#pragma once

#include <torch/nn/module.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/comm_hooks.h"
#include "cohort/ddp.h"
#include "core/grad_kit.h"
#include "ddp/bucket_assignment.h"

namespace cohort::detail {

/// kLeads: the reducer runs its Join's join allreduce each step; kFollows: it reads Join::current().
enum class JoinRole { kLeads, kFollows };

class Reducer {
 public:
  Reducer(std::shared_ptr<torch::nn::Module> module, DDPOptions options);

  void enter_no_sync() { ++no_sync_depth_; }
  void exit_no_sync() { --no_sync_depth_; }
  std::vector<std::vector<std::string>> bucket_layout() const;
  double last_wait_seconds() const { return last_wait_seconds_; }
  Comm& comm() const { return *comm_; }
  /// Uses `hook` for every later bucket reduction (once per DDP, before its first synchronized backward).
  void register_comm_hook(std::shared_ptr<CommHook> hook);
  torch::Device device() const;

  // Join (reducer_join.cpp)
  void attach_join(Join* join, JoinRole role);
  /// The collectives of one synchronized backward, with zeros, in finalize_backward's order.
  void shadow_step(const JoinStep& step);
  /// Copies rank `source`'s parameters and buffers to every rank (-1: nothing to do).
  void sync_from(int source);

 private:
  struct Bucket {
    torch::Tensor flat;            // the gradients of its parameters, back to back
    std::vector<int64_t> params;   // indices into params_
    std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
    int pending = 0;               // gradients still to arrive this backward
    Work work;
    GradBucket view;    // what a comm hook sees: index, flat, per-parameter views
    HookFuture future;  // the hook's reduction in flight
  };

  void build_buckets(const std::vector<int64_t>& arrival_order);
  void register_hooks();
  void on_gradient_ready(int64_t index);
  void launch_ready_buckets();
  void launch(size_t b);             // starts bucket b's reduction (allreduce or the hook)
  void wait_launched(size_t count);  // finishes the reductions of buckets [0, count), in order
  void finalize_backward();
  void mark_unused_parameters();
  void rebuild_buckets_once();        // note "first step"; leaves every bucket ready to launch
  void link_gradient(int64_t index);  // makes param.grad the bucket view (copying a fresh grad in)
  torch::Tensor bucket_view(int64_t index) const;
  void begin_join_step();    // at the start of a synchronized backward
  void resolve_join_step();  // before its first collective that needs the step
  void launch_join_step();   // note "join wait": the deferred join allreduce, before the first bucket

  std::shared_ptr<torch::nn::Module> module_;
  DDPOptions options_;
  std::shared_ptr<Comm> comm_;
  std::vector<torch::Tensor> params_;  // parameters that require grad, in module order
  std::vector<std::string> names_;
  std::vector<torch::Tensor> buffers_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int64_t, int64_t>> location_;  // parameter -> (bucket, index inside bucket)

  // Per-backward state, touched only by the autograd thread.
  bool in_backward_ = false;
  std::vector<char> ready_;    // got its gradient in this backward
  std::vector<char> touched_;  // got a gradient since the last synchronized step (no_sync too)
  size_t next_launch_ = 0;
  std::vector<int64_t> arrival_order_;
  bool rebuilt_ = false;  // false until the first synchronized backward ends (note "first step")
  int no_sync_depth_ = 0;
  double last_wait_seconds_ = 0;
  double scale_ = 1.0;              // what buckets are multiplied by before the sum: 1 / the step's divisor
  int64_t divisor_ = 1;             // the step's divisor (a comm hook averages with it)
  std::shared_ptr<CommHook> hook_;  // null: plain averaging allreduce
  int buffer_source_ = 0;           // whose buffers the step broadcasts: rank 0, or the lowest active rank
  Join* join_ = nullptr;            // the Join this reducer is attached to, if any
  JoinRole join_role_ = JoinRole::kFollows;
  bool join_pending_ = false;
  bool join_deferred_ = false;  // note "join wait": resolved at the end of backward, not before buckets
  bool join_launched_ = false;  // this step's join allreduce has started
  GradHookSet hooks_;           // last member: destroyed first, so no hook runs into a half-destroyed reducer
};

}  // namespace cohort::detail
