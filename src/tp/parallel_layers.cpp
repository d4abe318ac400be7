// The forward passes of the splittable layers (cohort/tensor_parallel.h): torch's own until a plan
// splits them, then the local matmul or lookup between the relayouts of Megatron's tensor and
// sequence parallelism.
#include <torch/nn/functional/embedding.h>
#include <torch/nn/functional/linear.h>

#include "core/check.h"
#include "tp/split.h"

namespace cohort::tp {
namespace detail {

torch::Tensor sum_grad_over(const torch::Tensor& replicated, const std::shared_ptr<Comm>& comm) {
  return relayout(replicated, comm, Placement::replicate(), Placement::replicate(), Placement::partial());
}

torch::Tensor relayout(const torch::Tensor& local, const std::shared_ptr<Comm>& comm, const Placement& from,
                       const Placement& to, const Placement& grad) {
  return DTensor::from_local(local, comm, from).redistribute(to, grad).to_local();
}

}  // namespace detail

namespace {

// An output split along the sequence: every rank must hold as many positions (Megatron's rule), or
// the next layer could not tell the whole length.
void check_even(const torch::Tensor& whole, const Placement& layout, const Comm& comm, const char* layer) {
  if (!layout.is_shard()) return;
  const int64_t dim = layout.dim() < 0 ? layout.dim() + whole.dim() : layout.dim();
  COHORT_CHECK_KIND(kInvalidArgument, dim >= 0 && dim < whole.dim() && whole.size(dim) % comm.size() == 0, layer,
                    ": an output of shape ", cohort::detail::str(whole.sizes()), " split as ", layout.str(), " over ",
                    comm.size(), " tp rank(s): sequence parallel needs that dimension divisible by the ", "tp size");
}

torch::Tensor column_parallel(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                              const Split& split, const ColwiseParallel& style) {
  // The input whole on every rank; its gradient is each rank's partial sum, summed (f, or the gather's
  // reduce-scatter under sequence parallel).
  const torch::Tensor x = detail::relayout(input, split.comm, style.input_layout(), Placement::replicate(),
                                           Placement::partial());
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias);
  if (style.output_layout().is_shard()) return y;
  COHORT_CHECK_KIND(kInvalidArgument, style.fused() == 1, "ColwiseParallel: a fused (", style.fused(),
                    "-part) output is kept split (Shard(-1)); gather the parts after splitting them");
  std::vector<int64_t> shape = y.sizes().vec();
  shape.back() = split.weight_shape[0];
  return DTensor::from_local(y, split.comm, Placement::shard(-1), shape).full_tensor();
}

torch::Tensor row_parallel(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                           const Split& split, const RowwiseParallel& style) {
  torch::Tensor x = input;
  if (style.input_layout().is_replicate()) {  // cut here; the gradient gathered back
    x = DTensor::from_local(input, split.comm, Placement::replicate()).redistribute(Placement::shard(-1)).to_local();
  }
  const torch::Tensor partial = torch::nn::functional::linear(x, weight);
  check_even(partial, style.output_layout(), *split.comm, "RowwiseParallel");
  torch::Tensor y =
      DTensor::from_local(partial, split.comm, Placement::partial()).redistribute(style.output_layout()).to_local();
  if (!bias.defined()) return y;
  // Sequence-split output: each rank adds the bias to its rows, so its gradient is a partial sum.
  return y + (style.output_layout().is_shard() ? detail::sum_grad_over(bias, split.comm) : bias);
}

}  // namespace

torch::Tensor LinearImpl::forward(const torch::Tensor& input) {
  if (split == nullptr) return torch::nn::LinearImpl::forward(input);
  if (const auto* col = std::get_if<ColwiseParallel>(&split->style))
    return column_parallel(input, weight, bias, *split, *col);
  return row_parallel(input, weight, bias, *split, std::get<RowwiseParallel>(split->style));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& indices) {
  if (split == nullptr) return torch::nn::EmbeddingImpl::forward(indices);
  const auto& style = std::get<RowwiseParallel>(split->style);
  const auto [first, count] = shard_range(split->weight_shape[0], split->comm->size(), split->comm->rank());
  // Rows of other ranks' vocabulary look up row 0 and are zeroed: the sum over ranks is the lookup.
  const torch::Tensor mine = (indices >= first) & (indices < first + count);
  const torch::Tensor local = torch::where(mine, indices - first, torch::zeros_like(indices));
  torch::Tensor rows = torch::nn::functional::embedding(local, weight);
  rows = rows * mine.unsqueeze(-1).to(rows.dtype());
  check_even(rows, style.output_layout(), *split->comm, "RowwiseParallel (Embedding)");
  return DTensor::from_local(rows, split->comm, Placement::partial()).redistribute(style.output_layout()).to_local();
}

torch::Tensor EmbeddingImpl::attend(const torch::Tensor& x) {
  if (split == nullptr) return torch::nn::functional::linear(x, weight);
  const auto& style = std::get<RowwiseParallel>(split->style);
  // Every rank's vocabulary rows against the whole input: the input's gradient is a partial sum.
  const torch::Tensor whole = detail::relayout(x, split->comm, style.output_layout(), Placement::replicate(),
                                               Placement::partial());
  return torch::nn::functional::linear(whole, weight);
}

}  // namespace cohort::tp
