// cohort::hvd::elastic: Horovod's elastic training (hvd.elastic.run with hvd.elastic.TorchState) on
// cohortrun's restarts. A State holds the model, the optimizer and the user's values (epoch, batch);
// commit() saves them and rank 0 persists them atomically, so a commit survives any process being
// killed. When a rank fails, the group ends and cohortrun --max-restarts starts it again (on the nodes
// its elastic rendezvous admits, so the size may change); run() then restores the newest
// commit, syncs it from rank 0 and calls the reset callbacks before fn. See docs/horovod.md, "Elastic".
// Included by cohort/horovod.h.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort::hvd::elastic {

/// The exit code of a process whose fn failed in run(): cohort's EX_TEMPFAIL ("try again").
inline constexpr int kRestartExitCode = 75;

struct StateOptions {
  /// Where commit() keeps the state (rank 0 writes <directory>/hvd-elastic-state.pt); empty: the
  /// environment variable COHORT_HVD_ELASTIC_DIR. Rank 0 of every attempt must see it (on several
  /// nodes: a shared file system). Use a fresh directory per job: run() resumes from what is there.
  TORCH_ARG(std::string, directory) = "";
};

/// hvd.elastic.TorchState: a model, its optimizer and named user values, committed and restored together.
class State {
 public:
  /// `values`: the user's values and their first values (Horovod's keyword arguments epoch=0,
  /// batch=0): numbers, strings, tensors, lists, anything torch::pickle_save takes. Throws
  /// cohort::Error when model or optimizer is null, a name repeats, or no directory is named.
  State(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<torch::optim::Optimizer> optimizer,
        std::vector<std::pair<std::string, c10::IValue>> values = {}, StateOptions options = {});
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  /// A user value, to read or assign (state["batch"] = int64_t(5)); throws for a name not given.
  c10::IValue& operator[](const std::string& name);

  /// Saves model, optimizer and values in memory and, on rank 0, to the directory (replacing the
  /// previous commit atomically). Collective: it returns once rank 0's file is in place, so a rank
  /// killed after it returns resumes from this commit. Call it on every rank at the same points.
  void commit();
  /// Puts the last commit (or sync) back into model, optimizer and values.
  void restore();
  /// Rank 0's model, optimizer and values on every rank (one broadcast), kept as the commit in memory.
  void sync();
  /// Functions run() calls, in order, after a restart (Horovod's reset callbacks): rescale the learning
  /// rate, rebuild a sampler for the new hvd::size(). Adds to the ones registered before.
  void register_reset_callbacks(const std::vector<std::function<void()>>& callbacks);
  /// Calls the reset callbacks.
  void on_reset();
  /// Commits so far in this job: restored with the state after a restart.
  int64_t commits() const;
  /// The file commits go to.
  const std::string& path() const;

  struct Impl;

 private:
  friend void run(State& state, const std::function<void(State&)>& fn);
  std::unique_ptr<Impl> impl_;
};

using TorchState = State;

/// hvd.elastic.run: on rank 0 restores the newest commit in the state's directory (when there is one),
/// sync()s it to every rank, calls the reset callbacks when this process is a restart
/// (TORCHELASTIC_RESTART_COUNT > 0), then calls fn(state). A cohort::Error out of any of it (a peer
/// that died, a collective's timeout) is printed and ends the process with kRestartExitCode at once,
/// without the exit handlers (they would wait for the dead peer), so cohortrun restarts the group
/// from the last commit. Other exceptions propagate. Needs hvd::init() first.
void run(State& state, const std::function<void(State&)>& fn);

}  // namespace cohort::hvd::elastic
COHORT_EXPORT_END
