// DistributedSampler: PyTorch's torch/utils/data/distributed.py transcribed (randperm with a CPU
// generator seeded by seed + epoch, pad from the front or drop the tail, then every num_replicas-th
// index from rank), plus the exact evaluation split. LibTorch's own DistributedRandomSampler
// shuffles differently, so it is not used.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

#include <numeric>
#include <string>
#include <utility>

#include "cohort/error.h"
#include "cohort/sampler.h"
#include "core/check.h"
#include "world/resolve_comm.h"

namespace cohort {
namespace {

// The (num_replicas, rank) a sampler shards over: explicit options win, -1 takes the Comm that
// resolve_comm gives (the world after cohort::init(), else a world of one).
std::pair<int, int> resolve_world(int num_replicas, int rank) {
  if (num_replicas != -1 && rank != -1) return {num_replicas, rank};
  const auto comm = detail::resolve_comm(nullptr, "DistributedSampler");
  if (num_replicas == -1) num_replicas = comm->size();
  if (rank == -1) rank = comm->rank();
  return {num_replicas, rank};
}

// Ceiling division for a non-negative numerator and a positive denominator.
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : dataset_size_(dataset_size), options_(std::move(options)) {
  COHORT_CHECK_KIND(kInvalidArgument, dataset_size_ >= 0, "DistributedSampler: dataset_size must be >= 0, got ",
                    dataset_size_);
  COHORT_CHECK_KIND(kInvalidArgument, options_.num_replicas() >= 1 || options_.num_replicas() == -1,
                    "DistributedSampler: num_replicas must be >= 1 (or -1 for the current world), got ",
                    options_.num_replicas());
  COHORT_CHECK_KIND(kInvalidArgument, options_.rank() >= 0 || options_.rank() == -1,
                    "DistributedSampler: rank must be >= 0 (or -1 for the current world), got ", options_.rank());
  const auto [num_replicas, rank] = resolve_world(options_.num_replicas(), options_.rank());
  COHORT_CHECK_KIND(kInvalidArgument, num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ",
                    num_replicas);
  COHORT_CHECK_KIND(kInvalidArgument, rank < num_replicas, "DistributedSampler: rank ", rank,
                    " is out of range for num_replicas ", num_replicas, " (valid ranks: 0..", num_replicas - 1, ")");
  COHORT_CHECK_KIND(kInvalidArgument, !(options_.exact_split() && options_.drop_last()),
                    "DistributedSampler: exact_split(true) keeps every index exactly once and cannot be "
                    "combined with drop_last(true); set one of them");
  options_.num_replicas(num_replicas).rank(rank);

  if (options_.exact_split()) {
    // Positions rank, rank + R, ... below N: ceil((N - rank) / R) of them.
    num_samples_ = dataset_size_ > rank ? ceil_div(dataset_size_ - rank, num_replicas) : 0;
    total_size_ = dataset_size_;
  } else {
    // PyTorch: with drop_last and an uneven split, ceil((N - R) / R), which equals floor(N / R);
    // otherwise ceil(N / R).
    num_samples_ = options_.drop_last() ? dataset_size_ / num_replicas : ceil_div(dataset_size_, num_replicas);
    total_size_ = num_samples_ * num_replicas;
  }
}

void DistributedSampler::set_epoch(int64_t epoch) { epoch_ = epoch; }

std::vector<int64_t> DistributedSampler::indices() const {
  const int64_t n = dataset_size_;
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (options_.shuffle()) {
    // torch.Generator().manual_seed(seed + epoch): Python wraps a negative seed to uint64, as does
    // this cast; unsigned addition avoids signed overflow.
    const uint64_t seed = static_cast<uint64_t>(options_.seed()) + static_cast<uint64_t>(epoch_);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    const at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
    const int64_t* data = perm.data_ptr<int64_t>();
    std::copy(data, data + n, order.begin());
  } else {
    std::iota(order.begin(), order.end(), int64_t{0});
  }

  // Padded (or truncated) order has total_size_ entries, entry i being order[i % n]: PyTorch's
  // `indices += indices[:pad]` and `(indices * ceil(pad / n))[:pad]` both repeat from the front.
  // With exact_split, total_size_ == n and nothing repeats.
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = options_.rank(); i < total_size_; i += options_.num_replicas()) {
    mine.push_back(order[static_cast<size_t>(i % n)]);
  }
  COHORT_CHECK_KIND(kInternal, static_cast<int64_t>(mine.size()) == num_samples_,
                    "DistributedSampler: internal error, produced ", mine.size(), " indices, expected ", num_samples_);
  return mine;
}

int64_t DistributedSampler::num_batches(int64_t batch_size) const {
  COHORT_CHECK_KIND(kInvalidArgument, batch_size >= 1, "DistributedSampler::batches: batch_size must be >= 1, got ",
                    batch_size);
  return options_.drop_last_batch() ? num_samples_ / batch_size : ceil_div(num_samples_, batch_size);
}

std::vector<std::vector<int64_t>> DistributedSampler::batches(int64_t batch_size) const {
  const int64_t count = num_batches(batch_size);
  const std::vector<int64_t> all = indices();
  std::vector<std::vector<int64_t>> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const auto first = all.begin() + b * batch_size;
    const auto last = all.begin() + std::min(num_samples_, (b + 1) * batch_size);
    out.emplace_back(first, last);
  }
  return out;
}

std::vector<torch::Tensor> DistributedSampler::batch_tensors(int64_t batch_size) const {
  const int64_t count = num_batches(batch_size);
  const std::vector<int64_t> all = indices();
  const torch::Tensor flat = torch::tensor(all, torch::dtype(torch::kLong));
  std::vector<torch::Tensor> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const int64_t start = b * batch_size;
    out.push_back(flat.narrow(0, start, std::min(batch_size, num_samples_ - start)));
  }
  return out;
}

}  // namespace cohort
