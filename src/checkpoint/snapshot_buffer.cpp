// SnapshotBuffer (see snapshot_buffer.h).
#include "checkpoint/snapshot_buffer.h"

#include <algorithm>

namespace cohort::detail::ckpt {
namespace {

constexpr int64_t kAlignment = 64;  // every view starts on a cache line, whatever its dtype

int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void SnapshotBuffer::prepare(const std::vector<torch::Tensor>& like) {
  int64_t total = 0;
  bool on_gpu = false;
  offsets_.clear();
  for (const torch::Tensor& t : like) {
    offsets_.push_back(total);
    total += aligned(t.numel() * static_cast<int64_t>(t.element_size()));
    on_gpu = on_gpu || t.is_cuda();
  }
  if (capacity() < total || (on_gpu && !pinned_)) {
    bytes_ = torch::Tensor();  // the old buffer goes before the new one is made
    bytes_ = torch::empty({std::max<int64_t>(total, 1)},
                          torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(on_gpu));
    pinned_ = on_gpu;
  }
}

torch::Tensor SnapshotBuffer::copy(size_t slot, const torch::Tensor& tensor) {
  const int64_t nbytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  torch::Tensor view = bytes_.narrow(0, offsets_.at(slot), nbytes).view(tensor.scalar_type()).view(tensor.sizes());
  view.copy_(tensor.detach());
  return view;
}

void SnapshotBuffer::release() {
  bytes_ = torch::Tensor();
  offsets_.clear();
  pinned_ = false;
}

}  // namespace cohort::detail::ckpt
