// The DDP reducer (see reducer.h for how the pieces fit and the note "bucket order").
#include "ddp/reducer.h"

#include <torch/torch.h>

#include <algorithm>

#include "comm/coalesced.h"
#include "core/check.h"
#include "core/grad_kit.h"
#include "core/log.h"
#include "core/trace_recorder.h"
#include "ddp/param_check.h"
#include "world/resolve_comm.h"

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Reducer::Reducer(std::shared_ptr<torch::nn::Module> module, DDPOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  comm_ = resolve_comm(options_.comm(), "DistributedDataParallel");
  scale_ = 1.0 / comm_->size();
  divisor_ = comm_->size();
  COHORT_CHECK_KIND(kInvalidArgument, options_.bucket_cap_mb() > 0 && options_.first_bucket_cap_mb() > 0,
                    "DDPOptions: bucket_cap_mb and first_bucket_cap_mb must be positive, got ",
                    options_.bucket_cap_mb(), " and ", options_.first_bucket_cap_mb());
  std::vector<torch::Tensor> all_params;
  std::vector<std::string> all_names;
  for (const auto& item : module_->named_parameters()) {
    all_names.push_back(item.key());
    all_params.push_back(item.value());
    if (!item.value().requires_grad()) continue;  // frozen: no gradient to reduce
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  for (const auto& buffer : module_->buffers()) buffers_.push_back(buffer);
  check_same_parameters(*comm_, all_names, all_params);
  broadcast_coalesced(*comm_, all_params, 0);
  broadcast_coalesced(*comm_, buffers_, 0);
  ready_.assign(params_.size(), 0);
  touched_.assign(params_.size(), 0);
  if (comm_->size() == 1) return;  // nothing to reduce: plain local training
  std::vector<int64_t> reverse_order;
  for (int64_t i = int64_t(params_.size()) - 1; i >= 0; --i) reverse_order.push_back(i);
  build_buckets(reverse_order);
  register_hooks();
}

void Reducer::build_buckets(const std::vector<int64_t>& arrival_order) {
  std::vector<int64_t> bytes, group;
  std::vector<DtypeDevice> groups;
  for (const auto& p : params_) {
    bytes.push_back(p.numel() * int64_t(p.element_size()));
    group.push_back(dtype_device_group(p, groups));
  }
  BucketLimits limits{int64_t(options_.first_bucket_cap_mb() * (1 << 20)),
                      int64_t(options_.bucket_cap_mb() * (1 << 20))};
  auto assignment = assign_buckets(arrival_order, bytes, group, limits);
  std::vector<Bucket> buckets(assignment.size());
  location_.assign(params_.size(), {-1, -1});
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.params = assignment[b];
    int64_t total = 0;
    for (int64_t p : bucket.params) {
      bucket.offsets.push_back(total);
      total += params_[p].numel();
    }
    bucket.flat = torch::zeros({total}, params_[bucket.params[0]].options().requires_grad(false));
    for (size_t i = 0; i < bucket.params.size(); ++i) location_[bucket.params[i]] = {int64_t(b), int64_t(i)};
    bucket.view.index = int64_t(b);
    bucket.view.is_last = b + 1 == assignment.size();
    bucket.view.buffer = bucket.flat;
  }
  // Keep the gradients' current values (a rebuild happens between backward and the optimizer step).
  std::vector<torch::Tensor> old_grads;
  for (const auto& p : params_) old_grads.push_back(p.grad());
  buckets_ = std::move(buckets);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto view = bucket_view(int64_t(i));
    if (old_grads[i].defined()) view.copy_(old_grads[i]);
    params_[i].mutable_grad() = view;
  }
  for (auto& bucket : buckets_)  // in the bucket's order, as its offsets
    for (int64_t p : bucket.params) bucket.view.gradients.push_back(bucket_view(p));
}

torch::Tensor Reducer::bucket_view(int64_t index) const {
  const auto [b, i] = location_[index];
  const Bucket& bucket = buckets_[b];
  return flat_alias(bucket.flat, bucket.offsets[i], params_[index].sizes());
}

void Reducer::register_hooks() {
  hooks_ = GradHookSet(params_, [this](int64_t index) { on_gradient_ready(index); });
}

void Reducer::link_gradient(int64_t index) { relink_grad(params_[index], bucket_view(index)); }

void Reducer::on_gradient_ready(int64_t index) {
  if (!in_backward_) {
    in_backward_ = true;
    std::fill(ready_.begin(), ready_.end(), 0);
    for (auto& bucket : buckets_) bucket.pending = int(bucket.params.size());
    next_launch_ = 0;
    if (no_sync_depth_ == 0) begin_join_step();
    at_end_of_backward([this] { finalize_backward(); });
  }
  link_gradient(index);
  touched_[index] = 1;
  if (no_sync_depth_ > 0) return;  // accumulate locally; the next synchronized backward reduces
  COHORT_CHECK_KIND(kInvalidArgument, !ready_[index], "DistributedDataParallel: parameter '", names_[index],
                    "' got two gradients in one backward pass; DDP supports one gradient per parameter per "
                    "backward (is the module reused across two backward calls with retain_graph?)");
  ready_[index] = 1;
  if (!rebuilt_) {  // the first synchronized backward reduces at its end (note "first step" in reducer.h)
    arrival_order_.push_back(index);
    return;
  }
  Bucket& bucket = buckets_[location_[index].first];
  if (--bucket.pending > 0) return;
  // The timeline: ready can precede launch when an earlier bucket still waits for a gradient.
  if (trace::enabled())
    trace::record_mark("bucket " + std::to_string(location_[index].first) + " ready", "ddp", "ready",
                       int64_t(bucket.flat.nbytes()));
  launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  // Only in bucket order (note "bucket order" in reducer.h), so every rank issues the same sequence.
  if (join_pending_ && !join_deferred_) resolve_join_step();
  if (!rebuilt_) return;  // the layout is not final yet (note "first step")
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void Reducer::launch(size_t b) {
  Bucket& bucket = buckets_[b];
  if (trace::enabled())  // the timeline: this bucket's last gradient arrived; its allreduce starts
    trace::record_mark("bucket " + std::to_string(b) + " launch", "ddp", "launch", int64_t(bucket.flat.nbytes()));
  if (join_deferred_) launch_join_step();  // note "join wait" in reducer.h: just before the first bucket
  if (hook_) {
    bucket.view.divisor = divisor_;
    bucket.future = hook_->run(*comm_, bucket.view);
    return;
  }
  bucket.flat.mul_(scale_);
  bucket.work = comm_->allreduce_async(bucket.flat, ReduceOp::kSum);
}

void Reducer::wait_launched(size_t count) {
  if (!hook_) {
    for (size_t b = 0; b < count; ++b) buckets_[b].work.wait();
    return;
  }
  // Round by round, each unfinished bucket one stage forward in bucket order: every rank issues a
  // hook's later collectives in the same order, and bucket b's second stage overlaps bucket b+1's first.
  for (bool more = true; more;) {
    more = false;
    for (size_t b = 0; b < count; ++b) {
      if (buckets_[b].future.done()) continue;
      buckets_[b].future.advance();
      more = more || !buckets_[b].future.done();
    }
  }
}

void Reducer::register_comm_hook(std::shared_ptr<CommHook> hook) {
  COHORT_CHECK_KIND(kInvalidArgument, hook != nullptr, "DistributedDataParallel::register_comm_hook: the hook is null");
  COHORT_CHECK_KIND(kInvalidArgument, hook_ == nullptr, "DistributedDataParallel::register_comm_hook: a comm hook (",
                    hook_->name(),
                    ") is already registered; register_comm_hook can be called once per DDP, as in PyTorch");
  COHORT_CHECK_KIND(kInvalidArgument, !rebuilt_ && !in_backward_,
                    "DistributedDataParallel::register_comm_hook: called after the first "
                    "synchronized backward; register the hook (",
                    hook->name(), ") before training starts, as in PyTorch");
  hook->claim();
  hook_ = std::move(hook);
}

void Reducer::mark_unused_parameters() {
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unused.push_back(names_[i]);
  if (unused.empty()) return;
  if (!options_.find_unused_parameters()) {
    // Let the launched buckets finish so no peer is left waiting in a collective, then explain.
    wait_launched(next_launch_);
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 5; ++i) list += (i ? ", " : "") + ("'" + unused[i] + "'");
    if (unused.size() > 5) list += " and " + std::to_string(unused.size() - 5) + " more";
    throw Error("DistributedDataParallel: parameter" + std::string(unused.size() > 1 ? "s " : " ") + list +
                    " received no gradient in this backward pass, so " +
                    (unused.size() > 1 ? "their buckets" : "its bucket") +
                    " could not be reduced. If parts of the model are unused in some steps, construct DDP with "
                    "DDPOptions().find_unused_parameters(true); otherwise make every parameter take part in "
                    "the loss (or set requires_grad(false) on the ones that never do).",
                ErrorKind::kInvalidArgument);
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    // A parameter with no gradient in any micro-batch since the last step contributes zero.
    if (!touched_[i]) bucket_view(int64_t(i)).zero_();
    link_gradient(int64_t(i));
    ready_[i] = 1;
    --buckets_[location_[i].first].pending;
  }
  launch_ready_buckets();
}

void Reducer::finalize_backward() {
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{in_backward_};
  if (no_sync_depth_ > 0) return;
  mark_unused_parameters();
  if (join_pending_) resolve_join_step();
  const auto start = Clock::now();
  if (!rebuilt_) {  // note "first step": the layout of every later step, then this step's buckets
    rebuild_buckets_once();
    launch_ready_buckets();
  }
  {
    trace::ScopedSpan span("bucket wait", "ddp", "wait");  // the timeline: backward ended; the rest is exposed
    wait_launched(buckets_.size());
  }
  last_wait_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
  std::fill(touched_.begin(), touched_.end(), 0);
  if (options_.broadcast_buffers() && !buffers_.empty()) broadcast_coalesced(*comm_, buffers_, buffer_source_);
}

void Reducer::rebuild_buckets_once() {
  rebuilt_ = true;
  // Rank 0's arrival order, so every rank builds the same buckets; parameters that never arrived go last.
  std::vector<char> seen(params_.size(), 0);
  std::vector<int64_t> order;
  for (int64_t i : arrival_order_)
    if (!seen[i]) seen[i] = 1, order.push_back(i);
  for (int64_t i = int64_t(params_.size()) - 1; i >= 0; --i)
    if (!seen[i]) order.push_back(i);
  auto agreed = torch::tensor(order, torch::kLong);
  comm_->broadcast(agreed, 0);
  order.assign(agreed.data_ptr<int64_t>(), agreed.data_ptr<int64_t>() + agreed.numel());
  arrival_order_.clear();
  arrival_order_.shrink_to_fit();
  build_buckets(order);  // the gradients move into the new buckets; each bucket is complete
  next_launch_ = 0;
  COHORT_DEBUG("DistributedDataParallel: rebuilt ", buckets_.size(), " buckets in gradient arrival order");
}

std::vector<std::vector<std::string>> Reducer::bucket_layout() const {
  std::vector<std::vector<std::string>> layout;
  for (const auto& bucket : buckets_) {
    layout.emplace_back();
    for (int64_t p : bucket.params) layout.back().push_back(names_[p]);
  }
  return layout;
}

}  // namespace cohort::detail
