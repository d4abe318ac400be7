// Offload's bounded page-locked staging between a device and host memory (host_staging.h).
#include "zero/offload/host_staging.h"

#include <torch/torch.h>

#include <algorithm>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {

HostStaging::HostStaging(torch::Device device, int slots, int64_t max_slot_bytes)
    : device_(device), slot_count_(std::max(1, slots)), max_slot_bytes_(std::max<int64_t>(max_slot_bytes, 64)) {
  if (device_.is_cuda()) stream_ = std::make_unique<CopyStream>(device_);
}

HostStaging::~HostStaging() {
  // The GPU may still be writing a slot: it must not be freed (or reused by malloc) before.
  try {
    while (!pending_.empty()) {
      pending_.front().done.synchronize();
      pending_.pop_front();
    }
  } catch (...) {  // a destructor must not throw; a failed device is reported by the next call anyway
  }
}

int64_t HostStaging::pinned_bytes() const { return int64_t(slots_.size()) * slot_bytes_; }

torch::Tensor HostStaging::staged(int slot, torch::Dtype dtype, int64_t numel) const {
  return slots_[size_t(slot)].narrow(0, 0, numel * int64_t(c10::elementSize(dtype))).view(dtype);
}

// A free slot of at least `bytes_needed`, completing the oldest copies while none is free. The slots
// are made at the first call as large as it needs, up to the bound, and grown (once idle) for a larger one.
int HostStaging::acquire(int64_t bytes_needed) {
  if (slots_.empty() || bytes_needed > slot_bytes_) {
    drain();
    slot_bytes_ = std::min(max_slot_bytes_, std::max<int64_t>(bytes_needed, 64));
    const auto options = torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(stream_ != nullptr);
    slots_.assign(size_t(slot_count_), torch::Tensor());
    free_.clear();
    for (int i = 0; i < slot_count_; ++i) {
      slots_[size_t(i)] = torch::empty({slot_bytes_}, options);
      free_.push_back(i);
    }
  }
  while (free_.empty()) complete_oldest();
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void HostStaging::complete_oldest() {
  Pending& oldest = pending_.front();
  oldest.done.synchronize();
  if (oldest.host.defined()) {
    torch::NoGradGuard no_grad;
    if (oldest.accumulate) {
      oldest.host.add_(oldest.staged);
    } else {
      oldest.host.copy_(oldest.staged);
    }
  }
  free_.push_back(oldest.slot);
  pending_.pop_front();
}

// Cuts [0, numel) into chunks of at most a slot of `dtype`; for each, `fill(pending, begin, n)` sets
// the chunk's tensors, `copy(pending)` queues its copy (on the side stream) or does it (on the CPU).
// Returns the bytes copied.
template <typename Fill, typename Copy>
int64_t HostStaging::queue_chunks(int64_t numel, torch::Dtype dtype, const Fill& fill, const Copy& copy) {
  const int64_t element = int64_t(c10::elementSize(dtype));
  const int64_t chunk = std::max<int64_t>(1, max_slot_bytes_ / element);
  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t n = std::min(chunk, numel - begin);
    Pending pending;
    pending.slot = acquire(n * element);
    pending.staged = staged(pending.slot, dtype, n);
    fill(pending, begin, n);
    copy(pending);
    if (stream_) pending.done = stream_->record();
    pending_.push_back(std::move(pending));
  }
  return numel * element;
}

void HostStaging::download(const torch::Tensor& src, const torch::Tensor& dst, bool accumulate) {
  COHORT_CHECK_KIND(kInternal, src.dim() == 1 && dst.dim() == 1 && src.numel() == dst.numel() && dst.is_cpu(),
                    "offload: a gradient of ", src.numel(), " elements staged into a host tensor of ", dst.numel());
  bytes_down_ += queue_chunks(
      src.numel(), src.scalar_type(),
      [&](Pending& pending, int64_t begin, int64_t n) {
        pending.keep = src.narrow(0, begin, n);
        pending.host = dst.narrow(0, begin, n);
        pending.accumulate = accumulate;
      },
      [&](Pending& pending) {
        if (stream_) stream_->copy(pending.staged, pending.keep);
        else pending.staged.copy_(pending.keep);
      });
}

void HostStaging::upload(const torch::Tensor& src, const torch::Tensor& dst) {
  COHORT_CHECK_KIND(kInternal, src.dim() == 1 && dst.dim() == 1 && src.numel() == dst.numel() && src.is_cpu(),
                    "offload: a host tensor of ", src.numel(), " elements staged into a parameter of ", dst.numel());
  torch::NoGradGuard no_grad;
  bytes_up_ += queue_chunks(
      dst.numel(), dst.scalar_type(),
      [&](Pending& pending, int64_t begin, int64_t n) {
        pending.staged.copy_(src.narrow(0, begin, n));  // the cast on the host's cores
        pending.keep = dst.narrow(0, begin, n);
      },
      [&](Pending& pending) {
        if (stream_) stream_->copy(pending.keep, pending.staged);
        else pending.keep.copy_(pending.staged);
      });
}

void HostStaging::drain() {
  while (!pending_.empty()) complete_oldest();
}

void HostStaging::uploads_done() {
  if (stream_) stream_->compute_waits();
}

}  // namespace cohort::detail
