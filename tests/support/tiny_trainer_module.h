// The tiny classifier the Trainer tests train (6 -> 8 -> 3, Adam), its data, and a TrainingModule
// whose validation metric is scripted per epoch (EarlyStopping and top-k checkpoints decide on known
// values).
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

/// Logs "score" = script[current_epoch] in each validation run.
struct ScriptedModule : TinyModule {
  explicit ScriptedModule(std::vector<double> script) : script_(std::move(script)) {}
  void validation_step(Batch& batch, int64_t) override {
    log("score", script_.at(static_cast<size_t>(current_epoch())), LogOptions().sync_dist(true));
  }
  std::vector<double> script_;
};

}  // namespace cohort::testing
