// The engine's large transient buffers (stage 3's gathered units, the staged gradients of a
// reduce-scatter) come from blocks the engine keeps and reuses whole, not from malloc. Under cohort's
// malloc policy (world/malloc_policy.h: freed blocks stay in malloc's heap) a freed unit-sized block
// is soon split by the small allocations of the forward (activations), the next unit's buffer no
// longer fits the hole, and the heap grows by about one unit for every unit of the model (measured:
// +57 MiB resident per GPT block of width 1024, so +1.8 GiB per rank at 32 blocks). A pooled block
// is never split. CPU tensors only: CUDA's caching allocator already reuses device blocks.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>

namespace cohort::detail {

struct BufferPoolState;  // buffer_pool.cpp: the idle blocks, shared with the storages leasing them

class BufferPool {
 public:
  BufferPool();
  /// An uninitialised 1-D tensor of `numel` elements: a pooled block on the CPU, torch::empty elsewhere.
  torch::Tensor empty(int64_t numel, const torch::TensorOptions& options);
  /// Gives an emptied storage (gathered_storage.h) the bytes `t` (contiguous from offset 0) needs
  /// again, from the pool on the CPU; the contents are uninitialised. No-op when it still has them.
  void refill(const torch::Tensor& t);
  /// Bytes in blocks no tensor uses now (kept for the next step).
  int64_t idle_bytes() const;

 private:
  std::shared_ptr<BufferPoolState> state_;
};

}  // namespace cohort::detail
