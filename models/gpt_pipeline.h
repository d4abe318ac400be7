// The GPT as pipeline layers (cohort/pipeline.h): a torch::nn::Sequential of the token embedding, the
// position embedding, the blocks, the final LayerNorm and the head, whose entries share the GPT's own
// modules (so a tensor-parallel plan applied to the GPT, its weights and its units are theirs). Each
// entry holds its module under the path the GPT gives it ("4.transformer.h.2.attn.c_attn.weight"), so
// gpt_pipeline_name, the entry number stripped, is the GPT's name: the Pipeline's parameter_names, by
// which checkpoints of the pipelined GPT are the GPT's. The head's weight is the token embedding's
// (nanoGPT's tie): "transformer.wte.weight" in the first and the last entry, which the Pipeline keeps
// tied when a cut puts them on different stages (torchtitan leaves tied models out of its pipelines;
// Megatron sums the two stages' gradients, as cohort does).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>

#include "models/gpt.h"

namespace cohort::models {

/// One entry of the pipelined GPT: `module` registered at `path` ("transformer.h.2") and what the
/// entry does with the activation and whether `module` is training (dropout: it follows the GPT's
/// train() and eval(), the entry's own flag may not).
struct GPTPipelineLayerImpl : torch::nn::Module {
  using Forward = std::function<torch::Tensor(const torch::Tensor& x, bool training)>;
  GPTPipelineLayerImpl(const std::string& path, std::shared_ptr<torch::nn::Module> module, Forward run)
      : module_(module), run_(std::move(run)) {
    torch::nn::Module* parent = this;
    std::string rest = path;
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      parent = parent->register_module(rest.substr(0, dot), std::make_shared<torch::nn::Module>()).get();
      rest = rest.substr(dot + 1);
    }
    parent->register_module(rest, std::move(module));
  }
  torch::Tensor forward(const torch::Tensor& x) { return run_(x, module_->is_training()); }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  Forward run_;
};
TORCH_MODULE(GPTPipelineLayer);

/// `gpt`'s layers in the order they run: token ids [B, T] in, logits [B, T, vocab] out (this rank's
/// vocabulary columns under a tensor-parallel plan, as GPT::forward gives them: GPT::loss_of applies).
/// Build it after parallelize_module.
inline torch::nn::Sequential gpt_pipeline_layers(const GPT& gpt) {
  const GPTConfig config = gpt->config;
  auto wte = gpt->wte, wpe = gpt->wpe;
  auto ln_f = gpt->ln_f;
  torch::nn::Sequential layers;
  layers->push_back(GPTPipelineLayer("transformer.wte", wte.ptr(), [config, wte](const torch::Tensor& idx, bool) mutable {
    TORCH_CHECK(idx.size(-1) <= config.block_size(), "GPT: sequence length ", idx.size(-1),
                " is longer than block_size ", config.block_size());
    return wte(idx);
  }));
  layers->push_back(GPTPipelineLayer("transformer.wpe", wpe.ptr(), [config, wpe](const torch::Tensor& x, bool training) mutable {
    // Under sequence parallel x holds this rank's part of the positions; the position embedding,
    // split as the token embedding, takes all of them and keeps the same part.
    const auto& split = wpe->split;
    const bool split_positions =
        split != nullptr && std::get<cohort::tp::RowwiseParallel>(split->style).output_layout().is_shard();
    const int64_t t = split_positions ? x.size(1) * split->comm->size() : x.size(1);
    auto positions = torch::arange(t, x.options().dtype(torch::kLong)).unsqueeze(0);
    return torch::dropout(x + wpe(positions), config.dropout(), training);
  }));
  for (size_t i = 0; i < gpt->blocks.size(); ++i) {
    auto block = gpt->blocks[i];
    layers->push_back(GPTPipelineLayer("transformer.h." + std::to_string(i), block.ptr(),
                                       [block](const torch::Tensor& x, bool) mutable { return block(x); }));
  }
  layers->push_back(
      GPTPipelineLayer("transformer.ln_f", ln_f.ptr(), [ln_f](const torch::Tensor& x, bool) mutable { return ln_f(x); }));
  layers->push_back(
      GPTPipelineLayer("transformer.wte", wte.ptr(), [wte](const torch::Tensor& x, bool) mutable { return wte->attend(x); }));
  return layers;
}

/// The GPT's name of a parameter of gpt_pipeline_layers ("4.transformer.h.2.ln_1.weight" ->
/// "transformer.h.2.ln_1.weight"): PipelineOptions::parameter_names.
inline std::string gpt_pipeline_name(const std::string& name) {
  const size_t dot = name.find('.');
  const bool numbered = dot != std::string::npos && dot > 0 && name.find_first_not_of("0123456789") == dot;
  return numbered ? name.substr(dot + 1) : name;
}

}  // namespace cohort::models
