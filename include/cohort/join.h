// cohort::Join: training on uneven inputs (PyTorch's torch.distributed.algorithms.Join and Joinable).
// Inside join.run(loop), a rank whose loop has ended "joins": it shadows the collectives of each step
// the other ranks still take (DDP's bucket allreduces with zeros, its buffer broadcast), so nobody
// waits in a collective its peer never calls, until every rank's loop has ended. Each step every rank
// allreduces who still has inputs (the join allreduce). See docs/ddp.md, "Uneven inputs: Join".
#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

struct JoinOptions {
  /// false: run() only runs the loop (PyTorch's enable), so one program serves even and uneven inputs.
  TORCH_ARG(bool, enable) = true;
  /// true (PyTorch's default): each step's gradient sum is divided by the world size, the ranks that
  /// have joined contributing zeros. false: by the number of ranks that still had inputs in that step.
  TORCH_ARG(bool, divide_by_initial_world_size) = true;
  /// true: the first step after a rank runs out of inputs raises on every rank, naming that rank,
  /// instead of letting the others go on.
  TORCH_ARG(bool, throw_on_early_termination) = false;
};

/// One step of a Join as its join allreduce saw it, the same on every rank.
struct JoinStep {
  int64_t index = 0;        // steps taken inside this Join before this one
  std::vector<int> active;  // the ranks that still had inputs in this step, ascending
  int world_size = 1;
  /// What the step's gradient sum is divided by: world_size, or active.size() (JoinOptions).
  int divisor = 1;
};

class Join;

/// Something whose training steps run collectives that a rank without inputs must shadow
/// (DistributedDataParallel is one; JoinableOptimizer another). PyTorch's Joinable with its JoinHook.
class Joinable {
 public:
  virtual ~Joinable() = default;
  /// On a rank whose loop has ended, once for each step the other ranks still take: this object's
  /// collectives of one step, contributing nothing.
  virtual void join_shadow_step(const JoinStep& step) = 0;
  /// Once every rank's loop has ended: make this rank's state equal to rank `source`'s (the lowest of
  /// the ranks that took the last step; -1 when no rank took a step).
  virtual void join_finish(int source) = 0;
  /// The Comm whose ranks join; null when this object runs no collective of its own.
  virtual Comm* join_comm() = 0;
  /// Where the join allreduce's tensor lives (cuda for NCCL).
  virtual torch::Device join_device() const { return torch::kCPU; }

 protected:
  /// Join::run calls it with the Join, and with null when run() ends. While attached, the joinable the
  /// Join leads() with calls Join::begin_step() before each step's first collective and
  /// Join::end_step() before it needs the step; the others read Join::current().
  virtual void attach_join(Join* join) {}

 private:
  friend class Join;
};

/// Runs a training loop on uneven inputs. Not copyable; one run() at a time.
class Join {
 public:
  /// `joinables` in the order their shadow steps run (DDP before the optimizer that uses its
  /// gradients). Throws cohort::Error when the list is empty or names no Comm.
  explicit Join(std::vector<Joinable*> joinables, JoinOptions options = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  /// Runs `loop` (this rank's steps), then shadows the other ranks' steps until every rank's loop has
  /// ended, then makes every joinable's state equal to the last rank to join. An exception from
  /// `loop` detaches the joinables and propagates (no collective runs after it). With
  /// throw_on_early_termination, every rank throws cohort::Error naming the rank(s) that ran out.
  void run(const std::function<void()>& loop);

  /// For joinables (see Joinable::attach_join): launch this step's join allreduce ...
  void begin_step();
  /// ... and wait for it; throws on early termination. Then current() describes this step.
  const JoinStep& end_step();
  /// The step begin_step()/end_step() or the shadowing loop last resolved.
  const JoinStep& current() const;
  /// Whether `joinable` runs the join allreduce: the first joinable with a Comm.
  bool leads(const Joinable& joinable) const;
  const JoinOptions& options() const { return options_; }

 private:
  struct State;
  JoinOptions options_;
  std::unique_ptr<State> state_;
};

/// A torch::optim::Optimizer in a Join: a rank that has joined steps it too, with the gradients the
/// joinables listed before it left (DDP's averaged buckets), so parameters and optimizer state (such as
/// momentum) stay equal on every rank and training can go on after the Join (the next epoch).
/// PyTorch's joined ranks skip the step; the Trainer and multi-epoch loops need it.
class JoinableOptimizer : public Joinable {
 public:
  explicit JoinableOptimizer(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {}
  void join_shadow_step(const JoinStep& step) override;
  void join_finish(int source) override {}
  Comm* join_comm() override { return nullptr; }

 private:
  torch::optim::Optimizer& optimizer_;
};

}  // namespace cohort
COHORT_EXPORT_END
