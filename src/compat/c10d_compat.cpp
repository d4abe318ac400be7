// Process-group construction for both LibTorch generations (see c10d_compat.h).
#include "compat/c10d_compat.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "cohort_config.h"
#if COHORT_WITH_CUDA
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
  throw Error("backend nccl requested, but this cohort was built against a LibTorch without CUDA; "
              "use Backend::kGloo or rebuild against a CUDA LibTorch");
#endif
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return c10d::ReduceOp::SUM;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace cohort::detail
