// Checkpoints: save_checkpoint()/load_checkpoint() of everything a resume needs (model, optimizer,
// LR scheduler, sampler position, step counter, RNG states, any cohort::Stateful such as the ZeRO
// engine, user key/values). Every rank writes its own shard in parallel, rank 0 a JSON manifest;
// a checkpoint appears atomically (temporary name, rename, then the `latest` pointer) and loads at
// another world size. Bad or partial checkpoints fail with the file named, and loading falls back to
// the previous good one. See docs/checkpoint.md.
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"
#include "cohort/sampler.h"
#include "cohort/stateful.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// What a checkpoint holds, as references to the live objects: saving reads them, loading writes
/// into them. Names are the prefixes of the saved tensors ("model/fc1.weight") and must be unique.
///
///   cohort::CheckpointState state;
///   state.add("model", *net).add("optimizer", opt).add("sampler", sampler, samples_in_epoch);
///   cohort::save_checkpoint("ckpt", state.set_step(step));
///   if (auto loaded = cohort::load_checkpoint("ckpt", state)) step = state.step();
class CheckpointState {
 public:
  CheckpointState();
  ~CheckpointState();
  CheckpointState(CheckpointState&&) noexcept;
  CheckpointState& operator=(CheckpointState&&) noexcept;

  /// Parameters and buffers (recursively, by their dotted names), the same on every rank.
  CheckpointState& add(const std::string& name, torch::nn::Module& module);
  /// Per-parameter state of LibTorch's SGD, Adam, AdamW, Adagrad and RMSprop, and every group's
  /// learning rate. Loading creates the states an optimizer makes lazily at its first step.
  CheckpointState& add(const std::string& name, torch::optim::Optimizer& optimizer);
  /// The scheduler's step count (the learning rates themselves belong to the optimizer).
  CheckpointState& add(const std::string& name, torch::optim::LRScheduler& scheduler);
  /// The sampler's epoch and `samples_in_epoch`: how many samples of this epoch all ranks together
  /// consumed. Loading calls set_epoch() and restores `samples_in_epoch`; a sampler of another dataset
  /// size, seed or shuffle is an error. Resume by skipping samples_in_epoch / (batch * world size)
  /// batches: PyTorch's split makes global batch k the same samples at every world size.
  CheckpointState& add(const std::string& name, DistributedSampler& sampler, int64_t& samples_in_epoch);
  /// Anything that implements cohort::Stateful (the ZeRO engine, a loss scaler, user state). A
  /// Stateful whose state_values() has "zero_stage" sets the manifest's zero_stage.
  CheckpointState& add(const std::string& name, Stateful& stateful);
  /// Keeps `stateful` alive as long as this state.
  CheckpointState& add(const std::string& name, std::shared_ptr<Stateful> stateful);

  /// The step counter: saved into the checkpoint's name (step-<n>) and restored by loading.
  CheckpointState& set_step(int64_t step);
  int64_t step() const;

  /// String key/values of the user's own (rank 0's are saved; loading replaces them).
  CheckpointState& set(const std::string& key, const std::string& value);
  /// The value of `key`, or `fallback` when there is none.
  std::string get(const std::string& key, const std::string& fallback = "") const;
  const std::map<std::string, std::string>& user_values() const;

  /// A check of a checkpoint's saved user values, run where load_checkpoint() checks each checkpoint
  /// before anything live changes: a throw makes that checkpoint unusable (the load falls back to an
  /// older one, naming it), as a Stateful's check_state_values does; a cohort::Error of kind
  /// kInvalidArgument (settings this run does not have) stops the load with that error instead. The
  /// Trainer sets one for its keys and its callbacks' (Callback::check_state). `saved_world_size`: the
  /// saving run's.
  using UserValuesCheck = std::function<void(const std::map<std::string, std::string>& user, int saved_world_size)>;
  CheckpointState& check_user_values(UserValuesCheck check);
  const UserValuesCheck& user_values_check() const;

  /// Save and restore this rank's RNG states (CPU default generator, and each CUDA device's when
  /// there are any), as "rng/cpu" and "rng/cuda<i>". On by default.
  CheckpointState& rng(bool enabled);
  bool rng() const;

  /// For the implementation: the registered holders of state, in order of add().
  struct Entry;
  const std::vector<Entry>& entries() const;
  std::map<std::string, std::string>& mutable_user_values();

 private:
  std::vector<Entry> entries_;
  std::map<std::string, std::string> user_;
  UserValuesCheck user_check_;
  int64_t step_ = 0;
  bool rng_ = true;
};

struct SaveOptions {
  /// Keep this many newest checkpoints in the directory and delete older ones after a save
  /// (0 keeps all). At least 2 leaves a previous checkpoint to fall back on.
  TORCH_ARG(int, keep_last) = 3;
  /// The Comm of the ranks that save together; null means the world's (cohort::init()), or a world
  /// of one when init() was not called.
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
  /// Return once this rank's share of the state is copied (into pinned host memory for GPU tensors, a
  /// buffer on the CPU, reused by the next save) and write it in the background, on a thread and a
  /// Comm of its own (split from `comm` at the first async save: a collective). One save is in flight
  /// at a time: the next save (or load) waits for it and raises its error. `latest` moves only once
  /// every rank's files are written and synced, so a crash during the write keeps the previous
  /// checkpoint. Call finish_checkpoint_saves() before the end (a save still in flight at exit is
  /// waited for, its error only logged). Lightning's AsyncCheckpointIO, DCP's async_save.
  TORCH_ARG(bool, async) = false;
};

/// Waits for the async save in flight, if any, and raises its error (on every rank that saved it);
/// then frees the snapshot buffer. A collective only in that it waits for the others' writes.
void finish_checkpoint_saves();
/// Whether an async save is still being written by this process.
bool checkpoint_save_in_flight();

struct LoadOptions {
  /// Fail when `dir` holds no checkpoint (missing or empty directory) instead of returning nothing.
  TORCH_ARG(bool, must_exist) = false;
  /// When the newest checkpoint is unusable (truncated, checksum mismatch, partial), try the older
  /// ones, newest first, each with a warning in the log. A checkpoint of another model is never
  /// skipped: it is an error at once.
  TORCH_ARG(bool, fallback) = true;
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
};

/// What load_checkpoint() loaded.
struct CheckpointInfo {
  std::string path;  ///< the step directory, e.g. "ckpt/step-200"
  int64_t step = 0;
  int world_size = 0;  ///< of the ranks that saved it
  int zero_stage = 0;
  /// The newer checkpoints that were skipped as unusable, each "path: reason".
  std::vector<std::string> skipped;
};

/// Saves `state` as `dir/step-<state.step()>` on every rank together (a collective: call it on all
/// ranks), then points `dir/latest` at it. Every rank writes its shard file in parallel; the
/// replicated tensors are spread over the ranks by size so no rank writes everything. Until the
/// rename nothing is visible: a crash leaves the previous checkpoint as `latest`. Returns the step
/// directory. Throws cohort::Error on every rank when any rank fails, naming the rank and file.
std::string save_checkpoint(const std::string& dir, CheckpointState& state, const SaveOptions& options = {});

/// Loads the checkpoint `dir/latest` points to (or, if `dir` is a step directory with a
/// manifest.json, that one) into `state`, at any world size. Returns nothing when `dir` holds no
/// checkpoint (unless must_exist). Nothing in `state` changes unless a checkpoint loads completely.
/// Throws cohort::Error naming the file and the problem when no usable checkpoint remains.
std::optional<CheckpointInfo> load_checkpoint(const std::string& dir, CheckpointState& state,
                                              const LoadOptions& options = {});

}  // namespace cohort
COHORT_EXPORT_END
