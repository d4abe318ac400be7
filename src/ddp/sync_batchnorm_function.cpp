// SyncBatchNorm's autograd function (see sync_batchnorm_function.h). Collectives, in order, per call:
// forward one allgather of [2C + 1]; backward one allreduce of [2C] when the input needs a gradient.
// Every rank makes both, an empty batch included, so the ranks' collective sequences stay equal.
#include "ddp/sync_batchnorm_function.h"

#include <torch/autograd.h>

#include "ddp/sync_batchnorm_math.h"

namespace cohort::detail {
namespace {

// The Comm rides in the autograd context's saved data as a capsule.
struct CommBox : torch::CustomClassHolder {
  explicit CommBox(std::shared_ptr<Comm> c) : comm(std::move(c)) {}
  std::shared_ptr<Comm> comm;
};

// Statistics are computed in float for half and bfloat16 inputs, as PyTorch's kernels accumulate.
torch::Tensor compute_view(const torch::Tensor& t) {
  return t.defined() && (t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16) ? t.to(torch::kFloat)
                                                                                                 : t;
}

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  // weight and bias are optional arguments: LibTorch 1.13's apply refuses undefined tensors.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const c10::optional<torch::Tensor>& weight_arg,
                               const c10::optional<torch::Tensor>& bias_arg, const SyncBatchNormCall* call) {
    const auto weight = weight_arg.value_or(torch::Tensor()), bias = bias_arg.value_or(torch::Tensor());
    const auto x = compute_view(input.contiguous());
    const int64_t channels = x.size(1);
    const int64_t count = x.size(1) == 0 ? 0 : x.numel() / channels;
    torch::Tensor mine;
    if (count > 0) {
      auto [mean, invstd] = batch_stats(x, call->eps);
      mine = torch::cat({mean, invstd, torch::full({1}, double(count), mean.options())});
    } else {  // nothing to contribute, but every rank takes part in the allgather
      mine = torch::zeros({2 * channels + 1}, x.options());
    }
    const auto gathered = call->comm->allgather(mine);
    const auto stats = merge_stats(gathered, channels, call->running_mean, call->running_var, call->momentum,
                                   call->eps);
    ctx->save_for_backward({x, compute_view(weight), stats.mean, stats.invstd});
    ctx->saved_data["count"] = stats.count;
    ctx->saved_data["comm"] = c10::IValue::make_capsule(c10::make_intrusive<CommBox>(call->comm));
    if (count == 0) return torch::empty_like(input);
    return normalize(x, stats.mean, stats.invstd, compute_view(weight), compute_view(bias)).to(input.dtype());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    auto box = c10::static_intrusive_pointer_cast<CommBox>(ctx->saved_data["comm"].toCapsule());
    const int64_t channels = x.size(1);
    const bool input_grad_needed = ctx->needs_input_grad(0);
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (x.numel() == 0) {  // an empty batch: only unblock the other ranks' allreduce
      if (input_grad_needed) box->comm->allreduce(torch::zeros({2 * channels}, x.options()));
      return {grad_input, grad_weight, grad_bias, torch::Tensor()};
    }
    const auto dy = compute_view(grads[0].contiguous());
    auto [sum_dy, sum_dy_xmu] = backward_sums(dy, x, mean);
    if (weight.defined() && ctx->needs_input_grad(1)) grad_weight = (sum_dy_xmu * invstd).to(weight.dtype());
    if (weight.defined() && ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.dtype());
    if (input_grad_needed) {
      const auto sums = box->comm->allreduce(torch::cat({sum_dy, sum_dy_xmu}));
      const GradSums global{sums.narrow(0, 0, channels), sums.narrow(0, channels, channels),
                            ctx->saved_data["count"].toDouble()};
      grad_input = detail::input_grad(dy, x, mean, invstd, weight, global).to(grads[0].dtype());
    }
    return {grad_input, grad_weight, grad_bias, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sync_batch_norm(const torch::Tensor& input, const SyncBatchNormCall& call) {
  const auto optional = [](const torch::Tensor& t) {
    return t.defined() ? c10::optional<torch::Tensor>(t) : c10::optional<torch::Tensor>();
  };
  return SyncBatchNormFunction::apply(input, optional(call.weight), optional(call.bias), &call);
}

}  // namespace cohort::detail
