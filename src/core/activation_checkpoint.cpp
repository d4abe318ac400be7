// cohort::checkpoint (include/cohort/activation_checkpoint.h): the autograd node that recomputes.
// Forward runs the callable without a graph; its outputs get one node whose backward runs the
// callable again with grad enabled (random generators restored first) and backpropagates through
// that run, which also accumulates the gradients of the parameters the callable used. The inner
// backward is re-entrant: end-of-backward callbacks strategies queue during it are deferred to the
// outer backward (core/grad_kit.h, DeferEndOfBackward), so DDP finishes once, after everything.
#include "cohort/activation_checkpoint.h"

#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>

#include "cohort/error.h"
#include "core/check.h"
#include "core/grad_kit.h"

namespace cohort::detail {
namespace {

thread_local int recomputing = 0;

// Generator states of the CPU and of each CUDA device the inputs are on.
struct RngStates {
  std::vector<std::pair<c10::Device, torch::Tensor>> states;

  static RngStates capture(const std::vector<torch::Tensor>& inputs) {
    std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
    for (const auto& t : inputs)
      if (t.defined() && t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end())
        devices.push_back(t.device());
    RngStates rng;
    for (const auto& device : devices) {
      auto generator = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng.states.emplace_back(device, generator.get_state());
    }
    return rng;
  }
  void restore() const {
    for (const auto& [device, state] : states) {
      auto generator = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
  }
};

class CheckpointNode : public torch::autograd::Node {
 public:
  CheckpointNode(RecomputeFn fn, const std::vector<torch::Tensor>& inputs, bool preserve_rng)
      : fn_(std::move(fn)), preserve_rng_(preserve_rng) {
    for (const auto& t : inputs) {
      inputs_.emplace_back(t, /*is_output=*/false);
      requires_grad_.push_back(t.defined() && t.requires_grad());
    }
    if (preserve_rng_) rng_ = RngStates::capture(inputs);
  }
  /// The index of each output that has a gradient edge into this node, in edge order.
  void add_slot(size_t output_index) { slots_.push_back(output_index); }
  std::string name() const override { return "cohort::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    COHORT_CHECK_KIND(kInvalidArgument, fn_,
                      "cohort::checkpoint: backward ran twice through the same checkpointed call; "
                      "pass retain_graph only where nothing is checkpointed");
    std::vector<torch::Tensor> inputs;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      torch::Tensor t = inputs_[i].unpack(shared_from_this());
      inputs.push_back(t.defined() ? t.detach().requires_grad_(requires_grad_[i]) : t);
    }
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode enable_grad(true);
      RngStates current;
      if (preserve_rng_) {
        current = RngStates::capture(inputs);
        rng_.restore();
      }
      ++recomputing;
      try {
        outputs = fn_(inputs);
      } catch (...) {
        --recomputing;
        if (preserve_rng_) current.restore();
        throw;
      }
      --recomputing;
      if (preserve_rng_) current.restore();
    }
    backward_through(outputs, slots_, grads);
    torch::autograd::variable_list result;
    for (size_t i = 0; i < inputs.size(); ++i)
      result.push_back(requires_grad_[i] && inputs[i].defined() ? inputs[i].grad() : torch::Tensor());
    fn_ = nullptr;  // the closure (and what it captured) is not needed again
    return result;
  }

  void release_variables() override {
    for (auto& saved : inputs_) saved.reset_data();
  }

 private:
  // grads[k] is the gradient of outputs[slots[k]] (outputs that are not floating point have none).
  static void backward_through(const std::vector<torch::Tensor>& outputs, const std::vector<size_t>& slots,
                               const torch::autograd::variable_list& grads) {
    COHORT_CHECK_KIND(kInvalidArgument, outputs.size() > (slots.empty() ? 0 : slots.back()),
                      "cohort::checkpoint: the recomputation returned ", outputs.size(),
                      " tensors, fewer than the first run; the callable must return the same outputs every time");
    std::vector<torch::Tensor> roots, root_grads;
    for (size_t k = 0; k < slots.size() && k < grads.size(); ++k) {
      const auto& out = outputs[slots[k]];
      if (!grads[k].defined() || !out.requires_grad()) continue;
      roots.push_back(out);
      root_grads.push_back(grads[k]);
    }
    if (roots.empty()) return;
    DeferEndOfBackward defer;  // callbacks queued inside belong to the backward that reached us
    torch::autograd::backward(roots, root_grads);
  }

  RecomputeFn fn_;
  std::vector<size_t> slots_;
  std::vector<torch::autograd::SavedVariable> inputs_;
  std::vector<bool> requires_grad_;
  bool preserve_rng_;
  RngStates rng_;
};

}  // namespace

bool in_recomputation() { return recomputing > 0; }

std::vector<torch::Tensor> run_checkpointed(RecomputeFn fn, const std::vector<torch::Tensor>& inputs,
                                            const CheckpointOptions& options) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);  // nothing to keep anyway
  auto node = std::shared_ptr<CheckpointNode>(new CheckpointNode(fn, inputs, options.preserve_rng_state()),
                                              torch::autograd::deleteNode);
  std::vector<torch::Tensor> outputs;
  {
    torch::NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  // Parameters inside the callable may need gradients even when no input does: the node is
  // always attached, so backward reaches the recomputation.
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& out = outputs[i];
    if (!out.defined() || !(out.is_floating_point() || out.is_complex())) continue;
    // An output that aliases an input (or is a view of one) gets storage of its own: its autograd
    // history must be this node's alone.
    bool aliases = out.is_view();
    for (const auto& in : inputs) aliases |= in.defined() && out.unsafeGetTensorImpl() == in.unsafeGetTensorImpl();
    if (aliases) out = out.clone();
    torch::autograd::create_gradient_edge(out, node);
    node->add_slot(i);
  }
  return outputs;
}

}  // namespace cohort::detail
