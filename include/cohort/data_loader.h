// Datasets and the loader the Trainer feeds its steps from. A Dataset says how many samples it holds
// and returns one (or a batch of them); the DataLoader cuts an epoch into batches through a
// cohort::DistributedSampler (so each rank reads its own share, reshuffled each epoch), collates them
// and, with num_workers > 0, prepares the next batches on background threads. Threads never change
// which samples a batch holds or their order: batch k is the same with 0 or 8 workers.
#pragma once

#include <torch/arg.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "cohort/export.h"
#include "cohort/sampler.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// A sample or a batch: `data` and `target`, LibTorch's Example (batches stack along dimension 0).
using Batch = torch::data::Example<>;

/// What the Trainer trains on. get() must be safe to call from several threads at once when the
/// loader has num_workers > 0 (reading a const tensor is).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(int64_t index) const = 0;
  /// The samples at `indices` (int64, 1-D) collated: the default stacks get() of each.
  virtual Batch get_batch(const torch::Tensor& indices) const;
};

/// Samples that are rows of two tensors (images and labels); batches are index_select of both.
class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor data, torch::Tensor target);
  int64_t size() const override { return data_.size(0); }
  Batch get(int64_t index) const override;
  Batch get_batch(const torch::Tensor& indices) const override;

 private:
  torch::Tensor data_, target_;
};

struct LoaderOptions {
  /// Samples per batch on each rank (the global batch is batch_size x ranks).
  TORCH_ARG(int64_t, batch_size) = 1;
  /// Reshuffle each epoch (training loaders; evaluation loaders of the Trainer never shuffle).
  TORCH_ARG(bool, shuffle) = false;
  /// Drop the last batch when it is smaller than batch_size.
  TORCH_ARG(bool, drop_last) = false;
  /// Background threads preparing batches; 0: each batch is made when it is needed.
  TORCH_ARG(int, num_workers) = 0;
  /// Batches each worker prepares ahead (PyTorch's prefetch_factor).
  TORCH_ARG(int, prefetch_factor) = 2;
};

/// A dataset, cut into batches for this rank. The Trainer calls distribute() before using it.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options = {});

  /// Shards the dataset over `replicas` ranks: training loaders as PyTorch's DistributedSampler does
  /// (padded, shuffled with seed + epoch when shuffle), evaluation loaders with the exact split
  /// (every sample once over all ranks, in order). Throws cohort::Error naming a bad option.
  void distribute(int replicas, int rank, bool evaluation, int64_t seed);
  /// A training loader without padding (TrainerOptions::uneven_inputs): shuffled as distribute()
  /// shuffles, but every sample once over all ranks (the sampler's exact_split).
  void distribute_unpadded(int replicas, int rank, int64_t seed);
  void set_epoch(int64_t epoch);
  /// The sampler of the last distribute() (a world of one before it).
  DistributedSampler& sampler();
  /// Batches this rank gets per epoch.
  int64_t num_batches() const;
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  /// Calls body(index, batch) for batches first, first + 1, ... of this epoch, in order, until body
  /// returns false or the epoch ends. Workers (num_workers > 0) prepare later batches meanwhile; an
  /// exception in a worker is rethrown here, at its batch.
  void for_each(int64_t first, const std::function<bool(int64_t, Batch&)>& body);

 private:
  std::shared_ptr<Dataset> dataset_;
  LoaderOptions options_;
  std::optional<DistributedSampler> sampler_;
};

}  // namespace cohort
COHORT_EXPORT_END
