// A post hook on a parameter's AccumulateGrad node: runs a callback once autograd has written the
// parameter's gradient. DDP's reducer and the ZeRO engine learn this way that a gradient is ready.
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace cohort::detail {

class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace cohort::detail
