// A decoder-only transformer laid out as nanoGPT's GPT (token and position embeddings, pre-norm blocks
// of causal multi-head self-attention and a GELU MLP, a final LayerNorm and an output head tied to the
// token embedding), with nanoGPT's parameter names (transformer.wte, transformer.h.0.attn.c_attn, ...)
// so weights move to and from PyTorch by name (models/pytorch_models.py's GPT is the twin). Each block
// is a sharding unit (cohort/fsdp.h): under ZeRO stage 3 one block's parameters are gathered at a time;
// elsewhere the unit is a plain call. Its Linears and embeddings are cohort::tp layers (torch's until a
// plan splits them): gpt_tensor_parallel_plan() is Megatron's split of it over a tp group (heads and
// MLP columns, the vocabulary, sequence-parallel LayerNorms; docs/parallelism.md). Presets from
// gpt-nano (minGPT's) to gpt2-xl: gpt_config(name).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include "cohort/dtensor.h"
#include "cohort/fsdp.h"
#include "cohort/tensor_parallel.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace cohort::models {

/// nanoGPT's GPTConfig (its defaults are GPT-2 small's; nanoGPT pads vocab_size to 50304 for speed).
struct GPTConfig {
  TORCH_ARG(int64_t, n_layer) = 12;
  TORCH_ARG(int64_t, n_head) = 12;
  TORCH_ARG(int64_t, n_embd) = 768;
  TORCH_ARG(int64_t, block_size) = 1024;  ///< the longest sequence (rows of the position embedding)
  TORCH_ARG(int64_t, vocab_size) = 50257;
  TORCH_ARG(double, dropout) = 0.0;  ///< after the embeddings, the attention weights and each residual branch
  TORCH_ARG(bool, bias) = true;      ///< biases in the Linears and LayerNorms (false: a bit faster and better)
  /// Each block's sharding-unit options (reshard_after_forward, activation_checkpointing).
  TORCH_ARG(cohort::UnitOptions, unit) = {};
};

/// The named configurations: minGPT's gpt-nano, gpt-micro, gpt-mini (3/4/6 layers, width 48/128/192),
/// GPT-2's gpt2 (124M), gpt2-medium (350M), gpt2-large (774M), gpt2-xl (1.56B), and gpt-1b (24
/// layers of width 1792, 1.02B); all with GPT-2's vocabulary (50257) and block size (1024).
inline std::map<std::string, GPTConfig> gpt_configs() {
  auto make = [](int64_t layers, int64_t heads, int64_t width) {
    return GPTConfig().n_layer(layers).n_head(heads).n_embd(width);
  };
  return {{"gpt-nano", make(3, 3, 48)},   {"gpt-micro", make(4, 4, 128)},     {"gpt-mini", make(6, 6, 192)},
          {"gpt2", make(12, 12, 768)},    {"gpt2-medium", make(24, 16, 1024)}, {"gpt2-large", make(36, 20, 1280)},
          {"gpt2-xl", make(48, 25, 1600)}, {"gpt-1b", make(24, 14, 1792)}};
}

/// The configuration called `name` (one of gpt_configs()).
inline GPTConfig gpt_config(const std::string& name) {
  const auto all = gpt_configs();
  const auto it = all.find(name);
  if (it == all.end()) {
    std::string names;
    for (const auto& item : all) names += (names.empty() ? "" : ", ") + item.first;
    TORCH_CHECK(false, "GPT: no configuration named \"", name, "\" (known: ", names, ")");
  }
  return it->second;
}

/// The number of parameters of a GPT of `c` (the tied head counted once): V*E + B*E + L*(12*E*E + 13*E)
/// + 2*E with biases, V*E + B*E + L*(12*E*E + 2*E) + E without.
inline int64_t gpt_num_parameters(const GPTConfig& c) {
  const int64_t e = c.n_embd(), per_block = 12 * e * e + (c.bias() ? 13 * e : 2 * e);
  return c.vocab_size() * e + c.block_size() * e + c.n_layer() * per_block + (c.bias() ? 2 * e : e);
}

/// Bytes autograd keeps for backward after the forward of `sequences` sequences of `tokens` tokens in
/// fp32, an estimate: per token and block about 16 x n_embd floats (the LayerNorms' inputs, q, k, v,
/// attention's output, the MLP's 4 x n_embd twice) and per sequence and block 2 x n_head x tokens^2
/// (the attention weights before and after the softmax); with activation checkpointing each block's
/// input and one block's worth; plus the logits and their softmax (2 x vocab_size per token). In
/// double: a GPT at int64's limits overflows it (the result is then INT64_MAX).
inline int64_t gpt_activation_bytes(const GPTConfig& c, int64_t sequences, int64_t tokens, bool checkpointing) {
  const double e = double(c.n_embd()), t = double(tokens), layers = double(c.n_layer());
  const double per_block = double(sequences) * (t * 16 * e + 2 * double(c.n_head()) * t * t);
  const double blocks = checkpointing ? per_block + layers * double(sequences) * t * e : layers * per_block;
  const double bytes = 4 * (blocks + 2 * double(sequences) * t * double(c.vocab_size()));
  return bytes >= 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

/// Causal attention of q, k, v [B, heads, T, head size]: softmax(q k^T / sqrt(head size) + causal
/// mask) v, with dropout on the weights. LibTorch 2.x's scaled_dot_product_attention (fused kernels
/// where the device has them); on 1.13 the same maths written out.
inline torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double dropout_p) {
#if TORCH_VERSION_MAJOR >= 2
  return torch::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
#else
  const int64_t t = q.size(-2);
  auto weights = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  auto future = torch::ones({t, t}, q.options().dtype(torch::kBool)).triu(1);
  weights = torch::softmax(weights.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(torch::dropout(weights, dropout_p, dropout_p > 0), v);
#endif
}

/// nanoGPT's LayerNorm: a weight and an optional bias (LibTorch's LayerNorm has both or neither).
struct GPTLayerNormImpl : torch::nn::Module {
  GPTLayerNormImpl(int64_t width, bool bias) {
    weight = register_parameter("weight", torch::ones({width}));
    if (bias) this->bias = register_parameter("bias", torch::zeros({width}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(GPTLayerNorm);

/// Multi-head causal self-attention: c_attn makes q, k and v in one Linear, c_proj mixes the heads.
/// Split by a tensor-parallel plan, this rank holds n_head / tp of the heads (c_attn's output and
/// c_proj's input are its heads' columns), and under sequence parallel x holds part of the positions
/// (c_attn gathers them).
struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const GPTConfig& c) : head_size(c.n_embd() / c.n_head()), dropout(c.dropout()) {
    c_attn = register_module("c_attn", cohort::tp::Linear(torch::nn::LinearOptions(c.n_embd(), 3 * c.n_embd()).bias(c.bias())));
    c_proj = register_module("c_proj", cohort::tp::Linear(torch::nn::LinearOptions(c.n_embd(), c.n_embd()).bias(c.bias())));
  }
  /// x [B, T, E] -> [B, T, E].
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor q_k_v = c_attn(x);  // [B, T, 3 x this rank's heads' width]
    const int64_t b = q_k_v.size(0), t = q_k_v.size(1), e = q_k_v.size(2) / 3;
    TORCH_CHECK(e % head_size == 0, "GPT: this rank holds ", e, " of c_attn's columns per q, k, v, not whole heads of ",
                head_size, ": n_head must divide by the tp size");
    auto qkv = q_k_v.split(e, 2);
    auto heads = [&](const torch::Tensor& y) { return y.view({b, t, e / head_size, head_size}).transpose(1, 2); };
    auto y = causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), is_training() ? dropout : 0.0);
    y = y.transpose(1, 2).contiguous().view({b, t, e});
    return torch::dropout(c_proj(y), dropout, is_training());
  }
  int64_t head_size;
  double dropout;
  cohort::tp::Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

/// The MLP: E -> 4E, GELU (the exact, erf one), 4E -> E, dropout.
struct GPTMLPImpl : torch::nn::Module {
  explicit GPTMLPImpl(const GPTConfig& c) : dropout(c.dropout()) {
    c_fc = register_module("c_fc", cohort::tp::Linear(torch::nn::LinearOptions(c.n_embd(), 4 * c.n_embd()).bias(c.bias())));
    c_proj = register_module("c_proj", cohort::tp::Linear(torch::nn::LinearOptions(4 * c.n_embd(), c.n_embd()).bias(c.bias())));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::dropout(c_proj(torch::gelu(c_fc(x))), dropout, is_training());
  }
  double dropout;
  cohort::tp::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(GPTMLP);

/// nanoGPT's initialisation of `module`'s parameters: N(0, 0.02) weights, zero biases, LayerNorms left
/// at weight 1 and bias 0, and the projections into the residual stream (c_proj) at 0.02 / sqrt(2
/// n_layer). Each part of the GPT applies it to itself as soon as it is made (the embeddings, then each
/// block in order), so the random draws are the same whether or not a cohort::ShardedInit shards each
/// block the moment it is made (a block is never seen whole again).
inline void nanogpt_init(torch::nn::Module& module, int64_t n_layer) {
  torch::NoGradGuard no_grad;
  const double projection_std = 0.02 / std::sqrt(2.0 * double(n_layer));
  auto ends_with = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    if (name.rfind("ln_", 0) == 0 || name.find(".ln_") != std::string::npos) continue;  // LayerNorms
    torch::Tensor p = item.value();
    if (ends_with(name, ".bias") || name == "bias") {
      p.zero_();
    } else {
      p.normal_(0.0, ends_with(name, "c_proj.weight") ? projection_std : 0.02);
    }
  }
}

/// One pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
struct GPTBlockImpl : torch::nn::Module {
  explicit GPTBlockImpl(const GPTConfig& c) {
    ln_1 = register_module("ln_1", GPTLayerNorm(c.n_embd(), c.bias()));
    attn = register_module("attn", CausalSelfAttention(c));
    ln_2 = register_module("ln_2", GPTLayerNorm(c.n_embd(), c.bias()));
    mlp = register_module("mlp", GPTMLP(c));
    nanogpt_init(*this, c.n_layer());
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  GPTLayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GPTMLP mlp{nullptr};
};
TORCH_MODULE(GPTBlock);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const GPTConfig& c = {}) : config(c) {
    TORCH_CHECK(c.n_layer() > 0 && c.n_head() > 0 && c.n_embd() > 0 && c.block_size() > 0 && c.vocab_size() > 0,
                "GPT: n_layer, n_head, n_embd, block_size and vocab_size must be positive (got ", c.n_layer(), ", ",
                c.n_head(), ", ", c.n_embd(), ", ", c.block_size(), ", ", c.vocab_size(), ")");
    TORCH_CHECK(c.n_embd() % c.n_head() == 0, "GPT: n_embd ", c.n_embd(), " is not a multiple of n_head ", c.n_head());
    TORCH_CHECK(c.dropout() >= 0 && c.dropout() < 1, "GPT: dropout ", c.dropout(), " is not in [0, 1)");
    transformer = register_module("transformer", std::make_shared<torch::nn::Module>());
    wte = transformer->register_module("wte", cohort::tp::Embedding(c.vocab_size(), c.n_embd()));
    nanogpt_init(*wte, c.n_layer());
    wpe = transformer->register_module("wpe", cohort::tp::Embedding(c.block_size(), c.n_embd()));
    nanogpt_init(*wpe, c.n_layer());
    auto h = transformer->register_module("h", std::make_shared<torch::nn::Module>());
    for (int64_t i = 0; i < c.n_layer(); ++i)
      blocks.push_back(cohort::fully_shard(h->register_module(std::to_string(i), GPTBlock(c)), c.unit()));
    ln_f = transformer->register_module("ln_f", GPTLayerNorm(c.n_embd(), c.bias()));
  }

  /// Token ids [B, T] (T <= block_size) -> logits [B, T, vocab_size]; the head is wte's weight. Split
  /// by a tensor-parallel plan, the logits are this rank's vocabulary columns (logits_of gives them
  /// whole, loss_of the loss without gathering them).
  torch::Tensor forward(const torch::Tensor& idx) {
    const int64_t t = idx.size(-1);
    TORCH_CHECK(t <= config.block_size(), "GPT: sequence length ", t, " is longer than block_size ", config.block_size());
    auto positions = torch::arange(t, idx.options().dtype(torch::kLong)).unsqueeze(0);  // [1, T]: split as idx
    auto x = torch::dropout(wte(idx) + wpe(positions), config.dropout(), is_training());
    for (auto& block : blocks) x = block(x);
    return wte->attend(ln_f(x));
  }

  /// forward's logits [B, T, vocab] whole: gathered from the tp group when split by vocabulary.
  torch::Tensor logits_of(const torch::Tensor& logits) const {
    if (wte->split == nullptr) return logits;
    std::vector<int64_t> shape = logits.sizes().vec();
    shape.back() = config.vocab_size();
    return cohort::DTensor::from_local(logits, wte->split->comm, cohort::Placement::shard(-1), shape).full_tensor();
  }
  /// Under sequence parallel, the positions to append to a sequence of `t` so that it splits over the
  /// tp group (0 otherwise).
  int64_t sequence_padding(int64_t t) const {
    if (wte->split == nullptr || !std::get<cohort::tp::RowwiseParallel>(wte->split->style).output_layout().is_shard())
      return 0;
    const int64_t ranks = wte->split->comm->size(), pad = (ranks - t % ranks) % ranks;
    TORCH_CHECK(t + pad <= config.block_size(), "GPT: block_size ", config.block_size(),
                " does not divide by the tp size ", ranks, ", which sequence parallel needs");
    return pad;
  }
  /// The mean cross-entropy of forward's logits against targets [B, T]: loss parallel when split.
  torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& targets) const {
    if (wte->split == nullptr)
      return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    std::vector<int64_t> shape = logits.sizes().vec();
    shape.back() = config.vocab_size();
    return cohort::tp::cross_entropy_parallel(
        cohort::DTensor::from_local(logits, wte->split->comm, cohort::Placement::shard(-1), shape), targets);
  }

  /// Appends `max_new_tokens` sampled tokens to idx [B, T] (nanoGPT's generate): each from the softmax
  /// of the last position's logits / temperature, restricted to the top_k most likely (0: all).
  torch::Tensor generate(torch::Tensor idx, int64_t max_new_tokens, double temperature = 1.0, int64_t top_k = 0) {
    return generate(std::move(idx), max_new_tokens, temperature, top_k,
                    [this](const torch::Tensor& context) { return forward(context); });
  }
  /// The same with each forward run by `run` (e.g. through cohort::Trainer::run_forward, which gathers
  /// a sharded model's units as they run: every rank then generates, with the same seed).
  using ForwardRunner = std::function<torch::Tensor(const torch::Tensor&)>;
  torch::Tensor generate(torch::Tensor idx, int64_t max_new_tokens, double temperature, int64_t top_k,
                         const ForwardRunner& run) {
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < max_new_tokens; ++i) {
      const int64_t t = idx.size(1);
      auto context = t <= config.block_size() ? idx : idx.narrow(1, t - config.block_size(), config.block_size());
      const int64_t pad = sequence_padding(context.size(1));  // after the last token: causal, so unseen
      if (pad > 0) context = torch::cat({context, torch::zeros({context.size(0), pad}, context.options())}, 1);
      auto logits = logits_of(run(context)).select(1, context.size(1) - pad - 1) / temperature;
      if (top_k > 0 && top_k < logits.size(-1)) {
        auto kth = std::get<0>(torch::topk(logits, top_k)).narrow(-1, top_k - 1, 1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
      }
      idx = torch::cat({idx, torch::multinomial(torch::softmax(logits, -1), 1)}, 1);
    }
    return idx;
  }

  GPTConfig config;
  std::shared_ptr<torch::nn::Module> transformer;
  cohort::tp::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<cohort::Unit<GPTBlockImpl>> blocks;
  GPTLayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT);

/// Megatron's tensor-parallel split of the GPT (torchtitan's plan shape): each block's heads (c_attn's
/// q, k and v columns, fused 3) and MLP columns, their projections by rows, the token embedding and
/// the tied head by vocabulary. With `sequence_parallel` the residual stream between them is split
/// along the sequence (the position embedding too; the LayerNorms sum their gradients): the
/// sequence length must then divide by the tp size. n_head must divide by the tp size.
inline cohort::tp::ParallelizePlan gpt_tensor_parallel_plan(bool sequence_parallel) {
  namespace tp = cohort::tp;
  const cohort::Placement stream = sequence_parallel ? cohort::Placement::shard(1) : cohort::Placement::replicate();
  tp::ParallelizePlan plan{
      {"transformer.wte", tp::RowwiseParallel().output_layout(stream)},
      {"transformer.h.*.attn.c_attn", tp::ColwiseParallel().input_layout(stream).fused(3)},
      {"transformer.h.*.attn.c_proj", tp::RowwiseParallel().output_layout(stream)},
      {"transformer.h.*.mlp.c_fc", tp::ColwiseParallel().input_layout(stream)},
      {"transformer.h.*.mlp.c_proj", tp::RowwiseParallel().output_layout(stream)},
  };
  if (sequence_parallel) {
    plan.push_back({"transformer.wpe", tp::RowwiseParallel().output_layout(stream)});
    for (const char* norm : {"transformer.h.*.ln_1", "transformer.h.*.ln_2", "transformer.ln_f"})
      plan.push_back({norm, tp::SequenceParallel()});
  }
  return plan;
}

}  // namespace cohort::models
