// A Vision Transformer laid out as torchvision's VisionTransformer (conv_proj patch embedding, a class
// token, learned position embedding, pre-norm encoder blocks of multi-head self-attention and a GELU
// MLP, a final LayerNorm and a linear head on the class token), dropout left out. Parameter names
// follow torchvision's state_dict; ViT-B/16 is ViTOptions() with image 224, patch 16, width 768,
// depth 12, heads 12, mlp 3072, 1000 classes. The defaults are a small ViT for 32x32 images. Each
// encoder block is a sharding unit (cohort/fsdp.h): under ZeRO stage 3 one block's parameters are
// gathered at a time; elsewhere the unit is a plain call.
#pragma once

#include <torch/torch.h>

#include "cohort/fsdp.h"

#include <string>
#include <tuple>

namespace cohort::models {

struct ViTOptions {
  TORCH_ARG(int64_t, image_size) = 32;
  TORCH_ARG(int64_t, patch_size) = 4;
  TORCH_ARG(int64_t, channels) = 3;
  TORCH_ARG(int64_t, hidden_dim) = 192;
  TORCH_ARG(int64_t, depth) = 6;
  TORCH_ARG(int64_t, num_heads) = 3;
  TORCH_ARG(int64_t, mlp_dim) = 768;
  TORCH_ARG(int64_t, num_classes) = 10;
  /// Each encoder block's sharding-unit options (reshard_after_forward, activation_checkpointing).
  TORCH_ARG(cohort::UnitOptions, unit) = {};
};

/// One pre-norm block: x + attention(ln_1(x)), then x + mlp(ln_2(x)). Input and output [N, L, E].
struct EncoderBlockImpl : torch::nn::Module {
  EncoderBlockImpl(int64_t hidden_dim, int64_t num_heads, int64_t mlp_dim) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden_dim}).eps(1e-6)));
    self_attention = register_module(
        "self_attention", torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(hidden_dim, num_heads)));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden_dim}).eps(1e-6)));
    // torchvision's MLPBlock is a Sequential with Linear at 0 and 3 (GELU, Dropout between).
    auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
    mlp_in = mlp->register_module("0", torch::nn::Linear(hidden_dim, mlp_dim));
    mlp_out = mlp->register_module("3", torch::nn::Linear(mlp_dim, hidden_dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    // LibTorch's MultiheadAttention takes [L, N, E] (it has no batch_first option).
    auto normed = ln_1(x).transpose(0, 1);
    auto attended = std::get<0>(self_attention->forward(normed, normed, normed, /*key_padding_mask=*/torch::Tensor(),
                                                        /*need_weights=*/false));
    x = x + attended.transpose(0, 1);
    return x + mlp_out(torch::gelu(mlp_in(ln_2(x))));
  }
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::MultiheadAttention self_attention{nullptr};
  torch::nn::Linear mlp_in{nullptr}, mlp_out{nullptr};
};
TORCH_MODULE(EncoderBlock);

struct ViTImpl : torch::nn::Module {
  explicit ViTImpl(const ViTOptions& options = {}) : options_(options) {
    TORCH_CHECK(options.image_size() % options.patch_size() == 0, "ViT: image_size ", options.image_size(),
                " is not a multiple of patch_size ", options.patch_size());
    TORCH_CHECK(options.hidden_dim() % options.num_heads() == 0, "ViT: hidden_dim ", options.hidden_dim(),
                " is not a multiple of num_heads ", options.num_heads());
    const int64_t side = options.image_size() / options.patch_size(), e = options.hidden_dim();
    conv_proj = register_module(
        "conv_proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.channels(), e, options.patch_size())
                                           .stride(options.patch_size())));
    class_token = register_parameter("class_token", torch::zeros({1, 1, e}));
    encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
    pos_embedding = encoder->register_parameter("pos_embedding", torch::randn({1, side * side + 1, e}) * 0.02);
    auto layers = encoder->register_module("layers", std::make_shared<torch::nn::Module>());
    for (int64_t i = 0; i < options.depth(); ++i)
      blocks.push_back(cohort::fully_shard(layers->register_module(
          "encoder_layer_" + std::to_string(i), EncoderBlock(e, options.num_heads(), options.mlp_dim())), options.unit()));
    ln = encoder->register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({e}).eps(1e-6)));
    heads = register_module("heads", std::make_shared<torch::nn::Module>());
    head = heads->register_module("head", torch::nn::Linear(e, options.num_classes()));
  }
  /// images [N, C, H, W] -> logits [N, num_classes].
  torch::Tensor forward(torch::Tensor images) {
    auto x = conv_proj(images).flatten(2).transpose(1, 2);  // [N, patches, E]
    x = torch::cat({class_token.expand({x.size(0), 1, x.size(2)}), x}, 1) + pos_embedding;
    for (auto& block : blocks) x = block(x);
    return head(ln(x.select(1, 0)));
  }
  ViTOptions options_;
  torch::nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token, pos_embedding;
  std::shared_ptr<torch::nn::Module> encoder, heads;
  std::vector<cohort::Unit<EncoderBlockImpl>> blocks;
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ViT);

}  // namespace cohort::models
