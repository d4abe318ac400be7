// The Fashion-MNIST job as a cohort::TrainingModule: the CNN of models/fashion_mnist_net.h as a
// Sequential (ZeRO stage 3 runs it unit by unit), cross-entropy, Adam at --lr, and the exact test
// accuracy over all ranks. It also times each epoch's training and evaluation for the summary line.
#pragma once

#include <cohort/training_module.h>

#include <chrono>
#include <cstdint>

namespace fashion_mnist {

/// The example's network, created layer by layer in Net's order: the same seed gives the same weights.
torch::nn::Sequential sequential_net(int64_t seed);

class FashionMnistModule : public cohort::TrainingModule {
 public:
  FashionMnistModule(int64_t seed, double lr);
  torch::Tensor training_step(cohort::Batch& batch, int64_t batch_index) override;
  /// Cross entropy: training_step's loss, and each microbatch's under --strategy pipeline.
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override;
  void on_train_batch_end(const torch::Tensor& loss, int64_t batch_index) override;
  void validation_step(cohort::Batch& batch, int64_t batch_index) override;
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override;
  void on_train_epoch_start() override;
  void on_validation_epoch_start() override;
  void on_validation_epoch_end() override;

  double lr() const { return lr_; }
  /// Seconds of the last epoch's training and evaluation.
  double train_seconds() const { return train_seconds_; }
  double eval_seconds() const { return eval_seconds_; }
  /// Whether this process started a training epoch: not after resuming at the last step (--max-steps).
  bool trained() const { return trained_; }

 private:
  double lr_;
  std::chrono::steady_clock::time_point train_start_, eval_start_;
  double train_seconds_ = 0, eval_seconds_ = 0;
  bool trained_ = false;
};

}  // namespace fashion_mnist
