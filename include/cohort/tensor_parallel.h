// Tensor and sequence parallelism with PyTorch's vocabulary (torch.distributed.tensor.parallel):
// parallelize_module(model, mesh.group_ptr("tp"), plan) splits the layers the plan names over the
// ranks of the tp axis: ColwiseParallel (a Linear's output features, Megatron's column-parallel),
// RowwiseParallel (its input features, row-parallel, or an Embedding's vocabulary), and
// SequenceParallel (any module that works position by position, a layer norm, on activations split
// along the sequence between them). LibTorch modules have no forward hooks, so the Linears and
// Embeddings a plan splits are cohort::tp::Linear and Embedding: drop-in torch::nn modules (same
// options, same parameters) that behave exactly as torch's until a plan splits them.
//
//   struct MLP : torch::nn::Module {
//     cohort::tp::Linear up{register_module("up", cohort::tp::Linear(64, 256))};
//     cohort::tp::Linear down{register_module("down", cohort::tp::Linear(256, 64))};
//     torch::Tensor forward(torch::Tensor x) { return down(torch::relu(up(x))); }
//   };
//   cohort::tp::parallelize_module(mlp, mesh.group_ptr("tp"),
//                                  {{"up", cohort::tp::ColwiseParallel()}, {"down", cohort::tp::RowwiseParallel()}});
//
// Parameters are cut in place (the same tensors, now this rank's shard), so build the optimizer
// after parallelize_module or before it alike. cross_entropy_parallel is loss parallel: the loss of
// vocabulary-sharded logits without gathering them.
#pragma once

#include <torch/arg.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "cohort/comm.h"
#include "cohort/dtensor.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort::tp {

/// A Linear's output features split over the ranks (its weight's rows, its bias). The input arrives
/// whole (Replicate) or split along the sequence (Shard(1): gathered here, Megatron's sequence
/// parallel); the output stays split (Shard(-1)) or is gathered (Replicate).
struct ColwiseParallel {
  TORCH_ARG(Placement, input_layout) = Placement::replicate();
  TORCH_ARG(Placement, output_layout) = Placement::shard(-1);
  /// The output is `fused` equal parts split each on its own (a fused q, k, v Linear: 3), so that
  /// every rank holds the same heads of each part.
  TORCH_ARG(int64_t, fused) = 1;
};

/// A Linear's input features split over the ranks (its weight's columns; the bias is added once,
/// after the sum), or an Embedding's vocabulary (its weight's rows). The input arrives split on its
/// last dimension (Shard(-1); an Embedding's indices whole); the partial sums are all-reduced
/// (Replicate) or reduce-scattered along the sequence (Shard(1), sequence parallel).
struct RowwiseParallel {
  TORCH_ARG(Placement, input_layout) = Placement::shard(-1);
  TORCH_ARG(Placement, output_layout) = Placement::replicate();
};

/// A module that works position by position (a LayerNorm, an RMSNorm, dropout) on activations split
/// along `sequence_dim`: no communication forward; its parameters' gradients are summed over the
/// ranks (each saw part of the sequence) by a hook on each.
struct SequenceParallel {
  TORCH_ARG(int64_t, sequence_dim) = 1;
};

using ParallelStyle = std::variant<ColwiseParallel, RowwiseParallel, SequenceParallel>;

/// A module name or a pattern with '*' for one name part ("h.*.attn.c_attn"), and its style.
struct PlanEntry {
  std::string name;
  ParallelStyle style;
};
using ParallelizePlan = std::vector<PlanEntry>;

/// What parallelize_module leaves on a layer it split.
struct Split {
  std::shared_ptr<Comm> comm;  ///< the tp group
  ParallelStyle style;
  std::vector<int64_t> weight_shape;  ///< the whole weight's, before the cut
};

/// torch::nn::Linear that a plan can split (ColwiseParallel, RowwiseParallel).
class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input);
  std::shared_ptr<Split> split;  ///< set by parallelize_module
};
TORCH_MODULE(Linear);

/// torch::nn::Embedding that a plan can split by vocabulary (RowwiseParallel).
class EmbeddingImpl : public torch::nn::EmbeddingImpl {
 public:
  using torch::nn::EmbeddingImpl::EmbeddingImpl;
  torch::Tensor forward(const torch::Tensor& indices);
  /// A tied output head (Flax's Embed.attend): the logits of `x` against the embedding's weight.
  /// Split by vocabulary, the logits stay split (Shard(-1), for cross_entropy_parallel) and `x`,
  /// laid out as this embedding's output (Replicate, or Shard(1) under sequence parallel), is
  /// gathered first.
  torch::Tensor attend(const torch::Tensor& x);
  std::shared_ptr<Split> split;
};
TORCH_MODULE(Embedding);

/// Splits the modules of `module` the plan names over `tp`'s ranks: every entry must name at least
/// one module, of a kind its style splits (one-line errors otherwise). Collective only in that
/// every rank must pass the same plan; the parameters must be the same on every rank.
void parallelize_module(torch::nn::Module& module, std::shared_ptr<Comm> tp, const ParallelizePlan& plan);

/// Mean cross-entropy of logits split by vocabulary (Shard(-1), as a ColwiseParallel head leaves
/// them) against whole `targets`: each rank's share of the softmax, summed, never gathering the
/// logits (loss parallel). `ignore_index` targets count for nothing, as in torch's cross_entropy.
torch::Tensor cross_entropy_parallel(const DTensor& logits, const torch::Tensor& targets, int64_t ignore_index = -100);

}  // namespace cohort::tp
COHORT_EXPORT_END
