// The ZeRO engine's optimizer step at the accumulation boundary: the reduced gradients unscaled into
// the fp32 masters, the fp16 overflow check across ranks (a step skipped everywhere), global-norm
// clipping, LibTorch's optimizer (inner_optimizer.h) on this rank's master shards, the LR schedule,
// and the updated masters written back into the compute-precision parameters, all-gathered at stage
// 1/2 (stage 3's units gather when they run). It keeps the step counters and the loss scaler.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cohort/stateful.h"
#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/loss_scaler.h"
#include "zero/model_parallel_norm.h"
#include "zero/state_store.h"

namespace cohort::detail {

class ShardOptimizer {
 public:
  /// The inner optimizer over the store's masters: options.optimizer_factory()'s when set
  /// (DeepSpeed's client optimizer), else the config's; its state is created at once.
  /// `model_parallel`: the norm over a tensor-parallel group too (null: this engine holds the model).
  ShardOptimizer(const EngineSettings& settings, StateStore& store, const EngineOptions& options,
                 std::unique_ptr<ModelParallelNorm> model_parallel = nullptr);

  /// DeepSpeed's rule: micro-steps count step() calls; the backward and step() of every gas-th one
  /// reduce and update, counted from the last load (a checkpoint holds no partial gradients, so a
  /// resume begins a window; its saved count need not divide by another world's accumulation:
  /// hostile pass 11, S-a).
  bool at_boundary() const { return (micro_steps_ - window_origin_ + 1) % settings_.gas == 0; }
  /// Called after every backward: at the boundary, the step; between boundaries nothing.
  void step();

  double loss_scale() const { return scaler_.scale(); }
  /// The learning rate the next optimizer step uses.
  double next_lr() const;
  int64_t global_steps() const { return global_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool last_step_skipped() const { return last_skipped_; }
  double last_gradient_norm() const { return last_norm_; }
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }

  /// The masters into the compute-precision parameters, all-gathered at stage 1/2.
  void write_back_and_gather();
  /// Runs `fn(g)` for each group with its master (and optimizer state) lent: with masters on file,
  /// reads ahead up to offload_optimizer.buffer_count slots and gives each back after, written when
  /// `changes`. A master lent already (a checkpoint's part) stays lent.
  void for_each_master(bool changes, const std::function<void(int64_t)>& fn);
  /// Creates the optimizer state of every master (what a checkpoint load fills).
  void create_states();
  /// Adds the optimizer state's bytes.
  void add_memory(MemoryReport& report) const;
  /// The counters, the loss scaler and each group's optimizer step count.
  void save(StateValues& values) const;
  void load(const StateValues& values);

 private:
  void unscale_gradients();
  torch::Tensor unscaled_of(int64_t g) const;
  torch::Tensor clipped(torch::Tensor unscaled) const;
  void for_each_gradient(const std::function<void(int64_t, const torch::Tensor&)>& fn);
  void step_all_at_once();
  void step_group_by_group();
  void write_back(int64_t g);
  void gather_parameters();
  void create_state_of(int64_t g);
  bool skipped_for_overflow();
  bool any_overflow();
  void clip_gradients();
  double global_norm_squared();
  void schedule_learning_rate();

  const EngineSettings& settings_;
  StateStore& store_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<ModelParallelNorm> model_parallel_;
  std::vector<torch::Tensor> unscaled_;  // each group's fp32 gradient for this step (not when on file)
  double clip_coefficient_ = 1.0;        // this step's clipping factor (1: none)
  LossScaler scaler_;
  int64_t micro_steps_ = 0;    // step() calls so far
  int64_t window_origin_ = 0;  // micro_steps_ when the accumulation windows began (a load)
  int64_t global_steps_ = 0;
  int64_t skipped_steps_ = 0;
  bool last_skipped_ = false;
  double last_norm_ = 0;
};

}  // namespace cohort::detail
