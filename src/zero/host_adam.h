// Adam and AdamW for masters in host memory (offload_optimizer cpu on a GPU): each flat fp32 master
// is stepped in one pass over its elements on the host's cores (read parameter, gradient and both
// moments once, write them once), where LibTorch's optimizer makes about ten passes of one operation
// each. The state is LibTorch's own (AdamParamState, AdamWParamState), so checkpoints and the engine
// read it as before. The result equals LibTorch's within float rounding (its add-with-alpha may be a
// fused multiply-add, the loop here is not): under 1e-6 relative after 20 steps (tested).
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <vector>

#include "cohort/zero_config.h"

namespace cohort::detail {

/// LibTorch's AdamW with a fused step for contiguous fp32 CPU parameters without amsgrad (any
/// other parameter: LibTorch's step).
class HostAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

/// The same for Adam with L2 weight decay (coupled: added to the gradient).
class HostAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace cohort::detail
