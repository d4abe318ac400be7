// Small facts that differ between LibTorch generations, header-only so tools can use them too.
// Everything that depends on TORCH_VERSION lives in src/compat/ (c10d_compat.h for process groups).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace cohort::detail {

/// The variable torchrun sets to turn on NCCL's async error handling (renamed in 2.2).
inline constexpr const char* kNcclAsyncErrorVariable =
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
    "TORCH_NCCL_ASYNC_ERROR_HANDLING";
#else
    "NCCL_ASYNC_ERROR_HANDLING";
#endif

/// Whether torchrun's agent keeps the workers' store (TORCHELASTIC_USE_AGENT_STORE) across restarts, so
/// that each attempt's keys need a prefix of their own, as PyTorch 1.x's env rendezvous gave them. From
/// 2.0 the agent makes a fresh store per attempt and drops the prefix: the restart count is each node's
/// own and may differ between nodes, which a prefix of it would keep apart forever (pytorch#108158).
inline constexpr bool kAgentStoreOutlivesAttempts = TORCH_VERSION_MAJOR < 2;

/// The key of `param` in an optimizer's state map: LibTorch 1.13 keys by the TensorImpl address
/// printed as a string, 2.x by the address itself.
using OptimizerStateMap = std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using OptimizerStateKey = OptimizerStateMap::key_type;

inline OptimizerStateKey optimizer_state_key(const torch::Tensor& param) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<OptimizerStateKey>(param.unsafeGetTensorImpl());
#else
  std::ostringstream key;  // what LibTorch 1.13's c10::guts::to_string(pointer) wrote
  key << param.unsafeGetTensorImpl();
  return key.str();
#endif
}

}  // namespace cohort::detail
