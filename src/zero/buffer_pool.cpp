// The engine's pool of reusable buffers (see buffer_pool.h). A block goes back to the idle list
// when the last storage using it dies (a DataPtr deleter, which may run on any thread: autograd's,
// a collective's), and is handed out again for a request of at most its size and at least 4/5 of
// it, so units of one shape share blocks and a small request does not pin a large block.
#include "zero/buffer_pool.h"

#include <torch/torch.h>

#include <cstdlib>
#include <cstring>

#include <map>
#include <mutex>

#include "cohort/error.h"
#include "core/check.h"
#include "zero/gathered_storage.h"

namespace cohort::detail {
namespace {
constexpr size_t kPoolAlignment = 64;  // LibTorch's CPU allocator's alignment
}  // namespace

struct BufferPoolState {
  std::mutex mutex;
  std::multimap<size_t, void*> idle;  // bytes -> block
  size_t idle_bytes = 0;
  ~BufferPoolState() {
    for (const auto& [bytes, block] : idle) std::free(block);
  }
};

namespace {

struct PoolLease {
  std::shared_ptr<BufferPoolState> state;
  void* block;
  size_t bytes;
};

void return_to_pool(void* context) {
  auto* lease = static_cast<PoolLease*>(context);
  {
    std::lock_guard<std::mutex> lock(lease->state->mutex);
    lease->state->idle.emplace(lease->bytes, lease->block);
    lease->state->idle_bytes += lease->bytes;
  }
  delete lease;
}

}  // namespace

BufferPool::BufferPool() : state_(std::make_shared<BufferPoolState>()) {}

namespace {

// A block of at least `bytes`: an idle one that fits, else a new one.
PoolLease* take_block(const std::shared_ptr<BufferPoolState>& state, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    auto found = state->idle.lower_bound(bytes);
    if (found != state->idle.end() && found->first <= bytes + bytes / 4) {
      auto* taken = new PoolLease{state, found->second, found->first};
      state->idle_bytes -= found->first;
      state->idle.erase(found);
      return taken;
    }
  }
  void* block = nullptr;
  const int failed = posix_memalign(&block, kPoolAlignment, bytes);
  COHORT_CHECK_KIND(kOutOfMemory, failed == 0, "ZeRO engine: could not allocate a buffer of ", bytes, " bytes (",
                    std::strerror(failed), ")");
  return new PoolLease{state, block, bytes};
}

}  // namespace

torch::Tensor BufferPool::empty(int64_t numel, const torch::TensorOptions& options) {
  if (options.device().type() != c10::kCPU || numel == 0) return torch::empty({numel}, options);
  PoolLease* taken = take_block(state_, size_t(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  return torch::from_blob(
      taken->block, {numel}, [taken](void*) { return_to_pool(taken); }, options);
}

void BufferPool::refill(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(t.numel()) * t.element_size();
  if (storage->nbytes() >= bytes) return;
  if (t.device().type() != c10::kCPU) return refill_storage(t);
  PoolLease* taken = take_block(state_, bytes);
  storage->set_data_ptr_noswap(c10::DataPtr(taken->block, taken, &return_to_pool, c10::Device(c10::kCPU)));
  storage->set_nbytes(bytes);
}

int64_t BufferPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return int64_t(state_->idle_bytes);
}

}  // namespace cohort::detail
