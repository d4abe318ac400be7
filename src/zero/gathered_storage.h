// Stage 3's gathered parameters are freed by emptying their storage in place, not by dropping the
// tensor: autograd saved views of them (a Linear saves weight.t()), and a view keeps a storage alive,
// so dropping our reference would keep every unit's whole parameters until its backward. Emptying
// the storage frees the memory under every view; gathering again refills the same storage, so the
// saved views see the parameters again when backward needs them (FSDP frees the same way).
#pragma once

#include <c10/core/DeviceGuard.h>
#include <torch/types.h>

namespace cohort::detail {

/// Frees the memory of `t`'s storage; `t` and every view of it stay, pointing at no bytes.
inline void empty_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

/// Gives an emptied storage back the bytes `t` (contiguous from offset 0) needs; the contents are
/// uninitialised. No-op when the storage still has them.
inline void refill_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(t.numel()) * t.element_size();
  if (storage->nbytes() >= bytes) return;
  c10::DeviceGuard on_device(t.device());  // the CUDA allocator allocates on the current device
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

/// The bytes `t`'s storage holds now (0 once emptied).
inline int64_t storage_bytes(const torch::Tensor& t) { return t.defined() ? int64_t(t.storage().nbytes()) : 0; }

}  // namespace cohort::detail
