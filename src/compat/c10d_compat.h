// The one place that knows which LibTorch generation we build against. LibTorch 1.13's Gloo and NCCL
// process groups derive from c10d::ProcessGroup; from 2.0 on they derive from c10d::Backend. Both
// expose the same collective methods, so the rest of cohort only sees `detail::ProcessGroupBase`.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <chrono>
#include <string>

#include "cohort/error.h"

namespace cohort::detail {

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

struct BackendConfig {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int size = 1;
  std::string local_address;  // the address other ranks reach this one at
  std::chrono::milliseconds timeout{300000};
};

/// c10d::Store with the same pure virtuals on every LibTorch: 2.x adds clone() (a second client of
/// the same store), 1.13 has none; a store cohort writes implements clone_store() instead.
class StoreBase : public c10d::Store {
 public:
  using c10d::Store::Store;
  virtual c10::intrusive_ptr<c10d::Store> clone_store() = 0;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Store> clone() override { return clone_store(); }
#endif
};

/// Gloo process group (CPU tensors) on `local_address`.
c10::intrusive_ptr<ProcessGroupBase> make_gloo(const BackendConfig& config);

/// NCCL process group (CUDA tensors); throws cohort::Error when LibTorch has no CUDA.
c10::intrusive_ptr<ProcessGroupBase> make_nccl(const BackendConfig& config);

/// True when this build of cohort can make NCCL process groups.
bool nccl_available();

/// Reduce-scatter of a flat `input` (size x output.numel() elements) into `output`, natively (NCCL's
/// ncclReduceScatter): no n x shard receive buffer on the GPU.
c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(ProcessGroupBase& group, at::Tensor output, at::Tensor input,
                                                   c10d::ReduceOp op);

/// All-gather of `input` into the flat `output` (size x input.numel() elements), natively.
c10::intrusive_ptr<c10d::Work> allgather_flat(ProcessGroupBase& group, at::Tensor output, at::Tensor input);

/// Tears a process group down in order (NCCL communicators destroyed while CUDA still works): LibTorch
/// 2.4+ warns, and can hang at exit, when a NCCL group is only destructed. A no-op on 1.13.
void shutdown_backend(ProcessGroupBase& group);

/// Makes `index` the current CUDA device of this process (NCCL and the caching allocator use it).
/// Throws cohort::Error when this build has no CUDA.
void set_cuda_device(int index);

}  // namespace cohort::detail
