// The CUDA side stream for offload's copies (copy_stream.h).
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

#include "compat/copy_stream.h"

namespace cohort::detail {

struct CopyEvent::Impl {
  at::cuda::CUDAEvent event;
};

CopyEvent::CopyEvent() = default;
CopyEvent::~CopyEvent() = default;
CopyEvent::CopyEvent(CopyEvent&&) noexcept = default;
CopyEvent& CopyEvent::operator=(CopyEvent&&) noexcept = default;
CopyEvent::CopyEvent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

bool CopyEvent::ready() const { return !impl_ || impl_->event.query(); }

void CopyEvent::synchronize() const {
  if (impl_) impl_->event.synchronize();
}

struct CopyStream::Impl {
  c10::DeviceIndex device;
  c10::cuda::CUDAStream side;
};

CopyStream::CopyStream(torch::Device device)
    : impl_(std::make_unique<Impl>(
          Impl{device.index() < 0 ? c10::cuda::current_device() : device.index(),
               c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                            device.index() < 0 ? c10::cuda::current_device() : device.index())})) {}

CopyStream::~CopyStream() = default;

void CopyStream::copy(const torch::Tensor& dst, const torch::Tensor& src) {
  // The side stream starts after what the compute stream queued (src's producer, dst's last reader).
  at::cuda::CUDAEvent queued;
  queued.record(c10::cuda::getCurrentCUDAStream(impl_->device));
  queued.block(impl_->side);
  c10::cuda::CUDAStreamGuard guard(impl_->side);
  dst.copy_(src, /*non_blocking=*/true);
  // The caching allocator must not hand a device block to the compute stream while this copy uses it.
  if (src.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(src.storage().data_ptr(), impl_->side);
  if (dst.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(dst.storage().data_ptr(), impl_->side);
}

CopyEvent CopyStream::record() {
  auto impl = std::make_unique<CopyEvent::Impl>();
  impl->event.record(impl_->side);
  return CopyEvent(std::move(impl));
}

void CopyStream::compute_waits() {
  at::cuda::CUDAEvent done;
  done.record(impl_->side);
  done.block(c10::cuda::getCurrentCUDAStream(impl_->device));
}

}  // namespace cohort::detail
