// The fused host step of Adam and AdamW (host_adam.h).
#include "zero/host_adam.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "compat/optimizer_state.h"

namespace cohort::detail {
namespace {

// One step's scalars, as LibTorch's AdamW computes them (in double, then used in float).
struct AdamScalars {
  bool decoupled = true;
  float decay = 1;  // AdamW: 1 - lr * weight_decay, applied to the parameter first
  float l2 = 0;     // Adam: weight_decay, the gradient's L2 term
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float sqrt_bias_correction2 = 1, eps = 0, step_size = 0;
};

AdamScalars scalars_of(double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                       bool decoupled) {
  AdamScalars s;
  s.decoupled = decoupled;
  s.decay = float(1 - lr * weight_decay);
  s.l2 = float(weight_decay);
  s.beta1 = float(beta1), s.one_minus_beta1 = float(1 - beta1);
  s.beta2 = float(beta2), s.one_minus_beta2 = float(1 - beta2);
  s.sqrt_bias_correction2 = float(std::sqrt(1 - std::pow(beta2, double(step))));
  s.eps = float(eps);
  s.step_size = float(lr / (1 - std::pow(beta1, double(step))));
  return s;
}

// Elements a thread takes at least (below, fewer threads).
constexpr int64_t kMinElementsPerThread = int64_t(1) << 16;

// fn(begin, end) over [0, n) on LibTorch's intra-op thread count. Not at::parallel_for: its OpenMP
// form is inline, and this file is not compiled with -fopenmp, so there it would run on one thread.
template <typename Fn>
void parallel_over(int64_t n, const Fn& fn) {
  const int64_t threads = std::clamp<int64_t>(n / kMinElementsPerThread, 1, std::max(1, at::get_num_threads()));
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t)
    helpers.emplace_back([&fn, begin = t * chunk, end = std::min(n, (t + 1) * chunk)] { fn(begin, end); });
  fn(0, std::min(n, chunk));
  for (auto& helper : helpers) helper.join();
}

void fused_step(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                const torch::Tensor& exp_avg_sq, const AdamScalars& s) {
  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  parallel_over(param.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float value = p[i], gradient = g[i];
      if (s.decoupled) {
        value *= s.decay;
      } else {
        gradient += s.l2 * value;
      }
      const float first = m[i] * s.beta1 + s.one_minus_beta1 * gradient;
      const float second = v[i] * s.beta2 + s.one_minus_beta2 * gradient * gradient;
      m[i] = first;
      v[i] = second;
      p[i] = value - s.step_size * (first / (std::sqrt(second) / s.sqrt_bias_correction2 + s.eps));
    }
  });
}

bool fusable(const torch::Tensor& p, const torch::Tensor& grad) {
  return p.is_cpu() && p.scalar_type() == torch::kFloat && p.is_contiguous() && grad.is_cpu() &&
         grad.scalar_type() == torch::kFloat && grad.is_contiguous() && grad.numel() == p.numel();
}

// Whether every parameter with a gradient can take the fused step.
bool all_fusable(torch::optim::Optimizer& optimizer, bool amsgrad) {
  if (amsgrad) return false;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined() && !fusable(p, p.grad())) return false;
  return true;
}

template <typename State, typename Options>
void step_fused(torch::optim::Optimizer& optimizer, bool decoupled) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (find_param_state(optimizer, p) == nullptr)
        set_param_state(optimizer, p, fresh_state(optimizer, group.options(), p));
      auto& state = static_cast<State&>(*find_param_state(optimizer, p));
      state.step(state.step() + 1);
      const auto [beta1, beta2] = options.betas();
      fused_step(
          p, p.grad(), state.exp_avg(), state.exp_avg_sq(),
          scalars_of(options.lr(), beta1, beta2, options.eps(), options.weight_decay(), state.step(), decoupled));
    }
  }
}

bool amsgrad_of(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    const auto& options = group.options();
    if (auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options); adamw && adamw->amsgrad()) return true;
    if (auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options); adam && adam->amsgrad()) return true;
  }
  return false;
}

}  // namespace

torch::Tensor HostAdamW::step(LossClosure closure) {
  if (closure != nullptr || !all_fusable(*this, amsgrad_of(*this))) return torch::optim::AdamW::step(closure);
  step_fused<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(*this, /*decoupled=*/true);
  return {};
}

torch::Tensor HostAdam::step(LossClosure closure) {
  if (closure != nullptr || !all_fusable(*this, amsgrad_of(*this))) return torch::optim::Adam::step(closure);
  step_fused<torch::optim::AdamParamState, torch::optim::AdamOptions>(*this, /*decoupled=*/false);
  return {};
}

}  // namespace cohort::detail
