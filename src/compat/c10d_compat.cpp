// Process-group construction for both LibTorch generations (see c10d_compat.h).
#include "compat/c10d_compat.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "cohort_config.h"
#if COHORT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace cohort::detail {

c10::intrusive_ptr<ProcessGroupBase> make_gloo(const BackendConfig& config) {
  auto options = c10d::ProcessGroupGloo::Options::create(config.timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(config.local_address));
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(config.store, config.rank, config.size, options);
}

bool nccl_available() { return COHORT_WITH_CUDA != 0; }

c10::intrusive_ptr<ProcessGroupBase> make_nccl(const BackendConfig& config) {
#if COHORT_WITH_CUDA
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = config.timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(config.store, config.rank, config.size, options);
#else
  throw Error(
      "backend nccl requested, but this cohort was built against a LibTorch without CUDA; "
      "use Backend::kGloo or rebuild against a CUDA LibTorch",
      ErrorKind::kInvalidArgument);
#endif
}

c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(ProcessGroupBase& group, at::Tensor output, at::Tensor input,
                                                   c10d::ReduceOp op) {
  c10d::ReduceScatterOptions options;
  options.reduceOp = op;
  return group._reduce_scatter_base(output, input, options);
}

c10::intrusive_ptr<c10d::Work> allgather_flat(ProcessGroupBase& group, at::Tensor output, at::Tensor input) {
  return group._allgather_base(output, input);
}

void shutdown_backend(ProcessGroupBase& group) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  group.shutdown();
#else
  (void)group;  // before 2.4 destruction was the only way, and did not warn
#endif
}

void set_cuda_device(int index) {
#if COHORT_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  throw Error("cuda:" + std::to_string(index) + " requested, but this cohort was built without CUDA",
              ErrorKind::kInvalidArgument);
#endif
}

}  // namespace cohort::detail
