// offload_optimizer nvme (ZeRO-Infinity): each group's fp32 master, the optimizer state LibTorch
// makes beside it, and at stage 2/3 its reduced gradient shard, kept in this rank's optimizer swap
// file (state_swapper.h) and lent to the engine a group at a time. Three slots per group, so backward
// can lend a gradient while the master stays on file. Without nvme the object exists but holds
// nothing, and every call is a no-op: the engine's parts call it without asking where state lives.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cohort/zero.h"
#include "zero/engine_settings.h"
#include "zero/offload/state_swapper.h"

namespace cohort::detail {

class OptimizerFile {
 public:
  explicit OptimizerFile(const EngineSettings& settings);

  /// Whether masters live on file (offload_optimizer.device nvme).
  bool active() const { return swapper_ != nullptr; }
  /// Whether stage 2/3's gradient shards live there too (on a CPU run; a GPU's stay on the device).
  bool holds_gradients() const { return gradients_; }

  /// Puts the next group's master (and, when holds_gradients, its zero gradient shard) on file;
  /// both tensors are empty when this returns.
  void add_group(torch::Tensor& master, torch::Tensor& shard_grad);
  /// Puts group g's optimizer state (made while its master is lent) beside it; it is lent with it.
  void add_state(int64_t g, std::vector<torch::Tensor> state);
  bool has_state(int64_t g) const { return active() && groups_[size_t(g)].state >= 0; }

  /// Starts reading group g's master, state and gradient ahead of their lend.
  void prefetch(int64_t g);
  /// Starts reading the offload_optimizer.buffer_count groups after g (a walk over the groups in order).
  void prefetch_after(int64_t g);
  /// Points the master and its state at their values in memory (they stay until give_back).
  void lend(int64_t g);
  /// Ends a lend; `changed` writes the values back.
  void give_back(int64_t g, bool changed);
  bool lent(int64_t g) const { return active() && swapper_->lent(groups_[size_t(g)].master); }

  /// The gradient shard for a reduction to land in: lent as zeros when `clean` (no reduction since
  /// the last step: nothing is read), else with its values. close_gradient writes it back.
  void open_gradient(int64_t g, bool clean);
  void close_gradient(int64_t g);
  /// Lends the gradient shard to be read (the step); give_back_gradient drops it unchanged.
  void prefetch_gradient(int64_t g);
  /// The gradient shards of the buffer_count groups after g.
  void prefetch_gradients_after(int64_t g);
  void lend_gradient(int64_t g);
  void give_back_gradient(int64_t g);

  /// Waits for every read and write started; a failure is an Error of kind I/O.
  void flush();

  /// Adds what is lent, read ahead or written behind (optimizer bytes) and the file's bytes.
  void add_memory(MemoryReport& report) const;

 private:
  struct Slots {
    StateSwapper::Slot master = -1, state = -1, gradient = -1;
  };

  const EngineSettings& settings_;
  std::unique_ptr<StateSwapper> swapper_;
  std::vector<Slots> groups_;
  bool gradients_ = false;  // holds_gradients
};

}  // namespace cohort::detail
