// The gradient kit (see grad_kit.h).
#include "core/grad_kit.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <c10/util/strides.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/grad_ready_hook.h"

namespace cohort::detail {

struct GradHookSet::Target {
  std::mutex mutex;  // held while a hook runs, so the owner's destructor waits for a running one
  std::function<void(int64_t)> on_ready;
  bool alive = true;
};

torch::Tensor flat_alias(const torch::Tensor& base, int64_t offset, c10::IntArrayRef shape) {
  torch::NoGradGuard no_grad;
  return torch::empty({0}, base.options())
      .set_(base.storage(), base.storage_offset() + offset, shape, c10::contiguous_strides(shape));
}

void relink_grad(torch::Tensor& param, const torch::Tensor& alias) {
  auto& grad = param.mutable_grad();
  if (grad.defined() && grad.data_ptr() == alias.data_ptr()) return;
  torch::NoGradGuard no_grad;
  if (grad.defined()) alias.copy_(grad);
  else alias.zero_();
  grad = alias;
}

namespace {
thread_local std::vector<std::function<void()>>* deferred_callbacks = nullptr;
}  // namespace

void at_end_of_backward(std::function<void()> callback) {
  if (deferred_callbacks != nullptr) {
    deferred_callbacks->push_back(std::move(callback));
    return;
  }
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(callback));
}

DeferEndOfBackward::DeferEndOfBackward() : outer_(deferred_callbacks) { deferred_callbacks = &callbacks_; }

DeferEndOfBackward::~DeferEndOfBackward() {
  deferred_callbacks = outer_;
  for (auto& callback : callbacks_) at_end_of_backward(std::move(callback));
}

GradHookSet::GradHookSet(const std::vector<torch::Tensor>& params, std::function<void(int64_t)> on_ready)
    : target_(std::make_shared<Target>()) {
  target_->on_ready = std::move(on_ready);
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    auto hook = std::make_unique<GradReadyHook>([target = target_, index = int64_t(i)] {
      std::lock_guard<std::mutex> lock(target->mutex);
      if (target->alive) target->on_ready(index);
    });
    hook_keys_.push_back(accumulator->add_post_hook(std::move(hook)));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradHookSet::~GradHookSet() { remove(); }

GradHookSet& GradHookSet::operator=(GradHookSet&& other) noexcept {
  if (this != &other) {
    remove();
    target_ = std::move(other.target_);
    accumulators_ = std::move(other.accumulators_);
    hook_keys_ = std::move(other.hook_keys_);
  }
  return *this;
}

void GradHookSet::remove() {
  if (target_) {
    std::lock_guard<std::mutex> lock(target_->mutex);
    target_->alive = false;
  }
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  accumulators_.clear();
  hook_keys_.clear();
  target_.reset();
}

namespace {

struct LiveOwners {
  std::mutex mutex;
  std::unordered_map<int64_t, void*> by_id;
  std::atomic<int64_t> next_id{1};
};

LiveOwners& live_owners() {
  static auto* owners = new LiveOwners();  // never destroyed: graphs may be freed after static teardown
  return *owners;
}

}  // namespace

OwnerHandle::OwnerHandle(void* owner) : id_(live_owners().next_id++) {
  std::lock_guard<std::mutex> lock(live_owners().mutex);
  live_owners().by_id[id_] = owner;
}

OwnerHandle::~OwnerHandle() {
  std::lock_guard<std::mutex> lock(live_owners().mutex);
  live_owners().by_id.erase(id_);
}

void* OwnerHandle::resolve(int64_t id) {
  std::lock_guard<std::mutex> lock(live_owners().mutex);
  const auto it = live_owners().by_id.find(id);
  return it == live_owners().by_id.end() ? nullptr : it->second;
}

int64_t dtype_device_group(const torch::Tensor& t, std::vector<DtypeDevice>& groups) {
  const DtypeDevice key{t.scalar_type(), t.device()};
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i] == key) return int64_t(i);
  groups.push_back(key);
  return int64_t(groups.size() - 1);
}

}  // namespace cohort::detail
