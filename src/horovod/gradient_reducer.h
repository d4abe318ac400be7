// What is behind hvd::DistributedOptimizer. Gradients are reduced in fusion groups: consecutive
// parameters in reverse registration order (roughly the order backward produces their gradients) of
// one dtype and device, up to HOROVOD_FUSION_THRESHOLD bytes. Each parameter's hook counts its
// backward passes; once every parameter of a group has had backward_passes_per_step of them, the
// group's fused allreduce starts (through hvd's operation table, named after its parameters) while
// backward goes on. step()/synchronize() start the groups still missing and wait for all.
//
// Note "group order": groups start strictly in their order, on every rank, so the collectives pair
// up; the groups come from parameter shapes and names that every rank has alike (a difference fails
// the first reduction, naming the tensors).
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/horovod.h"
#include "core/grad_kit.h"

namespace cohort::hvd::detail {

/// Fusion groups over tensors in launch order: consecutive runs of one `kind` (dtype and device
/// index) of at most `threshold` bytes; a tensor larger than it, or every tensor when it is 0, alone.
std::vector<std::vector<int64_t>> fusion_groups(const std::vector<int64_t>& bytes, const std::vector<int64_t>& kind,
                                                int64_t threshold);

class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                  const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                  DistributedOptimizerOptions options);

  void step();
  void synchronize();
  void zero_grad();
  void enter_skip() { ++skip_depth_; }
  void exit_skip() { --skip_depth_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  struct Group {
    std::vector<int64_t> params;  // indices into params_
    std::string name;             // "allreduce.fc2.bias, fc2.weight"
    int pending = 0;              // parameters still short of their backward passes
    Handle handle = -1;
  };

  void take_parameters(const torch::OrderedDict<std::string, torch::Tensor>& named_parameters);
  void build_groups(int64_t threshold);
  void on_gradient(int64_t index);
  void launch_ready_groups();
  void launch(Group& group);
  void reset_passes();

  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  DistributedOptimizerOptions options_;
  std::vector<torch::Tensor> params_;  // the optimizer's parameters that require grad, in model order
  std::vector<std::string> names_;
  std::vector<Group> groups_;
  std::vector<int64_t> group_of_;  // parameter -> its group
  std::vector<int> passes_left_;   // backward passes still to accumulate before reducing
  size_t next_launch_ = 0;         // groups started this step (note "group order")
  bool synchronized_ = false;
  bool warned_step_after_sync_ = false;
  int skip_depth_ = 0;
  std::mutex mutex_;                   // hooks may run on autograd's device threads
  cohort::detail::GradHookSet hooks_;  // last member: destroyed first, so no hook runs into a half-destroyed reducer
};

}  // namespace cohort::hvd::detail
