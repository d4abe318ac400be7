// The tiny classifier the Trainer tests train (6 -> 8 -> 3, Adam), its data, a TrainingModule
// whose validation metric is scripted per epoch (EarlyStopping and top-k checkpoints decide on known
// values), and ResidualModule: the same task for a module with its own layers and a two-input forward
// (a residual block marked as a sharding unit, blocks its shard_units() policy makes units of).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "cohort/trainer.h"

namespace cohort::testing {

inline torch::nn::Sequential tiny_network(int64_t seed = 7) {
  torch::manual_seed(seed);
  torch::nn::Sequential net;
  net->push_back(torch::nn::Linear(6, 8));
  net->push_back(torch::nn::ReLU());
  net->push_back(torch::nn::Linear(8, 3));
  return net;
}

/// `n` samples of 6 features and labels 0..2, the same on every rank.
inline std::shared_ptr<TensorDataset> tiny_data(int64_t n = 64) {
  torch::manual_seed(1234);
  auto x = torch::randn({n, 6});
  auto y = torch::randint(0, 3, {n}, torch::kLong);
  return std::make_shared<TensorDataset>(x, y);
}

struct TinyModule : TrainingModule {
  explicit TinyModule(int64_t seed = 7, double lr = 0.01) : TrainingModule(tiny_network(seed)), lr_(lr) {}
  torch::Tensor training_step(Batch& batch, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
    log("train_loss", loss, LogOptions().prog_bar(true).on_epoch(true).sync_dist(true));
    return loss;
  }
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override {  // strategy pipeline
    return torch::nn::functional::cross_entropy(output, target);
  }
  void validation_step(Batch& batch, int64_t) override {
    auto logits = forward(batch.data);
    log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target), LogOptions().sync_dist(true));
    log("val_acc", logits.argmax(1).eq(batch.target).to(torch::kFloat).mean(), LogOptions().sync_dist(true));
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(lr_));
  }
  double lr_;
};

/// x + fc2(relu(fc1(x))) * gate: a residual block with two inputs.
struct GatedBlockImpl : torch::nn::Module {
  GatedBlockImpl() : fc1(register_module("fc1", torch::nn::Linear(8, 8))), fc2(register_module("fc2", torch::nn::Linear(8, 8))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& gate) { return x + fc2(torch::relu(fc1(x))) * gate; }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(GatedBlock);

/// x + tanh(fc(x)): what the policy makes units of, inside a Sequential.
struct SkipBlockImpl : torch::nn::Module {
  SkipBlockImpl() : fc(register_module("fc", torch::nn::Linear(8, 8))) {}
  torch::Tensor forward(torch::Tensor x) { return x + torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(SkipBlock);

/// A TrainingModule with its own layers (TrainingModule()): embed -> gated residual block (a marked
/// unit) -> two skip blocks in a Sequential (units by shard_units()) -> head. Its forward takes the
/// features and a gate made from them.
struct ResidualModule : TrainingModule {
  /// `in_configure_model`: the layers are made in configure_model() (Lightning's hook), not here.
  explicit ResidualModule(int64_t seed = 7, bool in_configure_model = false) : seed_(seed), lazy_(in_configure_model) {
    if (!lazy_) make_layers();
  }
  void configure_model() override {
    if (!lazy_) return;
    make_layers();
    for (const auto& p : block->parameters()) block_elements_made += p.numel();
  }
  void make_layers() {
    torch::manual_seed(seed_);
    embed = register_module("embed", torch::nn::Linear(6, 8));
    block = cohort::fully_shard(register_module("block", GatedBlock()));
    tail = register_module("tail", torch::nn::Sequential(SkipBlock(), SkipBlock()));
    head = register_module("head", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& gate) {
    return head(tail->forward(block(torch::relu(embed(x)), gate)));
  }
  torch::Tensor logits(const torch::Tensor& x) { return forward(x, torch::sigmoid(x.narrow(1, 0, 1))); }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(logits(batch.data), batch.target);
    log("train_loss", loss, LogOptions().on_epoch(true).sync_dist(true));
    return loss;
  }
  void validation_step(Batch& batch, int64_t) override {
    log("val_loss", torch::nn::functional::cross_entropy(logits(batch.data), batch.target), LogOptions().sync_dist(true));
  }
  UnitPolicy shard_units() override { return units_of_type<SkipBlockImpl>(); }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(0.01));
  }
  torch::nn::Linear embed{nullptr}, head{nullptr};
  Unit<GatedBlockImpl> block;
  torch::nn::Sequential tail{nullptr};
  int64_t seed_;
  bool lazy_;
  int64_t block_elements_made = 0;  ///< the marked block's elements right after configure_model made it
};

/// Logs "score" = script[current_epoch] in each validation run.
struct ScriptedModule : TinyModule {
  explicit ScriptedModule(std::vector<double> script) : script_(std::move(script)) {}
  void validation_step(Batch& batch, int64_t) override {
    log("score", script_.at(static_cast<size_t>(current_epoch())), LogOptions().sync_dist(true));
  }
  std::vector<double> script_;
};

}  // namespace cohort::testing
