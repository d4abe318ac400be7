// How the Fashion-MNIST job updates its network: cohort's DistributedDataParallel with Adam (the
// default), or the ZeRO engine (--zero-stage N or --deepspeed-config FILE). The training loop in
// train.cpp is the same for both; only the step, the checkpoint state and the digest differ.
#pragma once

#include <cohort/checkpoint.h>
#include <cohort/world.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>

#include "train.h"

namespace fashion_mnist {

class Trainer {
 public:
  virtual ~Trainer() = default;
  /// One training step on this rank's batch; returns the batch's mean loss.
  virtual double train_step(const torch::Tensor& images, const torch::Tensor& labels) = 0;
  /// Logits in float32, for evaluation (called under NoGradGuard, on every rank).
  virtual torch::Tensor predict(const torch::Tensor& images) = 0;
  virtual void set_training(bool on) = 0;
  /// Adds the network and optimizer (or the engine) to a checkpoint state.
  virtual void add_to(cohort::CheckpointState& state) = 0;
  /// params-sha256 of the final parameters (every rank calls it: ZeRO gathers shards).
  virtual std::string digest() = 0;
  /// "DDP, Adam lr 0.001" or "ZeRO stage 2 (bf16), Adam lr 0.001", for the header line.
  virtual std::string describe() const = 0;
  /// The lr this run sets (--lr, or the ds_config's optimizer lr); none when a scheduler drives it.
  virtual std::optional<double> configured_lr() const = 0;
  /// The lr the optimizer uses now (after a resume: what the checkpoint restored).
  virtual double current_lr() const = 0;
  /// Sets the optimizer's lr (every param group), as PyTorch users do after loading a state dict.
  virtual void set_lr(double lr) = 0;
  /// Where configured_lr comes from: "--lr" or "--deepspeed-config".
  virtual std::string lr_source() const { return "--lr"; }
  /// Samples per rank per step the trainer wants (a ds_config may set the micro batch), or 0.
  virtual int64_t micro_batch() const { return 0; }
};

/// DDP unless the config asks for ZeRO. The network starts from config.seed on every rank.
std::unique_ptr<Trainer> make_trainer(const TrainConfig& config, const cohort::World& world);

}  // namespace fashion_mnist
