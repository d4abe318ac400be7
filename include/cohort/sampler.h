// cohort::DistributedSampler: which dataset indices this rank reads each epoch. In its default mode
// it is index-for-index equal to PyTorch's torch.utils.data.distributed.DistributedSampler (same
// seeds, same randperm, same padding or dropping), so a C++ job and a Python job see the same data
// order. exact_split(true) adds the evaluation split PyTorch lacks: every index exactly once across
// ranks.
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// Options of DistributedSampler; chained setters as in LibTorch:
/// `SamplerOptions().shuffle(true).seed(0).drop_last(false)`.
struct SamplerOptions {
  /// Shuffle with torch::randperm seeded by seed + epoch (PyTorch's rule). Otherwise 0, 1, 2, ...
  TORCH_ARG(bool, shuffle) = true;
  /// Must be the same on every rank. Any int64 (negative seeds wrap to uint64 as in Python).
  TORCH_ARG(int64_t, seed) = 0;
  /// false: pad by repeating indices from the front so every rank gets ceil(N / replicas) samples.
  /// true: drop the tail so every rank gets floor(N / replicas) samples.
  TORCH_ARG(bool, drop_last) = false;
  /// Number of ranks sharing the dataset; -1 takes the size of the current world (a world of one
  /// before cohort::init()).
  TORCH_ARG(int, num_replicas) = -1;
  /// This process's shard in [0, num_replicas); -1 takes the rank in the current world.
  TORCH_ARG(int, rank) = -1;
  /// Evaluation split: no padding and no dropping. Rank r gets positions r, r + replicas, ... of
  /// the (shuffled or not) order, so every index appears exactly once across ranks and shard sizes
  /// differ by at most one (ranks below N % replicas get one more). Ranks then run different
  /// numbers of batches: reduce metrics once at the end, never per batch, and train inside a
  /// cohort::Join (cohort/join.h), which lets the ranks with more batches finish. Cannot be combined
  /// with drop_last.
  TORCH_ARG(bool, exact_split) = false;
  /// batches()/batch_tensors() drop the last batch when it is smaller than batch_size.
  TORCH_ARG(bool, drop_last_batch) = false;
};

/// Splits the indices [0, dataset_size) across ranks, reshuffled each epoch.
/// With exact_split(false) (the default), indices() equals list(torch.utils.data.distributed.
/// DistributedSampler(dataset, num_replicas, rank, shuffle, seed, drop_last)) after
/// set_epoch(epoch). Throws cohort::Error naming the option and value for a negative dataset_size,
/// num_replicas < 1, rank outside [0, num_replicas), or exact_split together with drop_last.
class DistributedSampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, SamplerOptions options = {});

  /// Selects the shuffle of this epoch (seed + epoch). Call it before each epoch, on every rank.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch, in order; size() of them.
  std::vector<int64_t> indices() const;

  /// Number of indices this rank gets per epoch (PyTorch's num_samples, len(sampler)).
  int64_t size() const { return num_samples_; }
  /// Indices over all ranks per epoch: size() * num_replicas(), or dataset_size() with exact_split.
  int64_t total_size() const { return total_size_; }
  int64_t dataset_size() const { return dataset_size_; }
  int num_replicas() const { return options_.num_replicas(); }
  int rank() const { return options_.rank(); }
  /// The options with num_replicas and rank resolved (never -1).
  const SamplerOptions& options() const { return options_; }

  /// indices() cut into consecutive batches of batch_size; the last one may be shorter unless
  /// drop_last_batch is set. Throws cohort::Error when batch_size < 1.
  std::vector<std::vector<int64_t>> batches(int64_t batch_size) const;
  /// The same batches as int64 tensors of shape [batch] (views into one tensor of indices()), ready
  /// for `data.index({batch})` or `index_select(0, batch)`.
  std::vector<torch::Tensor> batch_tensors(int64_t batch_size) const;
  /// Number of batches batches(batch_size) returns.
  int64_t num_batches(int64_t batch_size) const;

 private:
  int64_t dataset_size_ = 0;
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
  int64_t total_size_ = 0;
};

}  // namespace cohort
COHORT_EXPORT_END
