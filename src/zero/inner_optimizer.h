// The inner optimizer of the ZeRO engine: LibTorch's own SGD, Adam or AdamW, run over this rank's fp32
// shards only. This file builds it from the ds_config "optimizer" section and reads and creates its
// per-shard state (moments, momentum), which LibTorch otherwise makes lazily at the first step.
#pragma once

#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/zero_config.h"

namespace cohort::detail {

/// SGD, Adam or AdamW with the config's hyper-parameters. DeepSpeed's "Adam" with decoupled weight
/// decay (its default adam_w_mode) is AdamW. `fused_on_host`: Adam and AdamW step each fp32 master
/// in one pass on the host's cores (host_adam.h; DeepSpeed's CPU Adam).
std::unique_ptr<torch::optim::Optimizer> make_inner_optimizer(const OptimizerConfig& config,
                                                              std::vector<torch::Tensor> shards,
                                                              bool fused_on_host = false);

/// The learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);
double learning_rate(torch::optim::Optimizer& optimizer);

/// Adam's and AdamW's hyper-parameters, for a checkpoint's readers outside cohort (cohort-ckpt export
/// --format dcp writes PyTorch's param_groups from them): "zero.adam.lr" (the learning rate now),
/// ".beta1", ".beta2", ".eps", ".weight_decay", ".amsgrad" and ".decoupled" (1: AdamW). Nothing for
/// another optimizer. A load does not read them back: the engine's schedule sets the learning rate.
void save_hyperparameters(torch::optim::Optimizer& optimizer, std::map<std::string, double>& values);

/// The state tensors of `param` by name ("exp_avg", "exp_avg_sq", "max_exp_avg_sq",
/// "momentum_buffer"); empty when the optimizer has none for it yet.
std::vector<std::pair<std::string, torch::Tensor>> state_tensors_of(torch::optim::Optimizer& optimizer,
                                                                    const torch::Tensor& param);
/// Creates the state the first step would create, where that state equals a fresh one (all but SGD
/// with dampening, whose first step copies the gradient; nothing for an unknown optimizer type), so
/// checkpoints and memory reports see it from the start.
void create_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param);
/// The step counter of `param`'s state (0 for SGD or no state); set_step_count creates no state.
int64_t step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& param);
void set_step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& param, int64_t step);

}  // namespace cohort::detail
