// Datasets and the DataLoader (see cohort/data_loader.h). The sampler decides every batch's indices
// before any worker starts; workers only fetch, each the batches k with k % workers == its number, so
// the order of batches and samples never depends on the threads.
#include "cohort/data_loader.h"

#include <torch/torch.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort {

Batch Dataset::get_batch(const torch::Tensor& indices) const {
  std::vector<torch::Tensor> data, target;
  const torch::Tensor contiguous = indices.contiguous();
  const auto* index = contiguous.data_ptr<int64_t>();
  for (int64_t i = 0; i < indices.numel(); ++i) {
    Batch one = get(index[i]);
    data.push_back(one.data);
    target.push_back(one.target);
  }
  return {torch::stack(data), torch::stack(target)};
}

TensorDataset::TensorDataset(torch::Tensor data, torch::Tensor target)
    : data_(std::move(data)), target_(std::move(target)) {
  COHORT_CHECK_KIND(kInvalidArgument, data_.dim() >= 1 && target_.dim() >= 1 && data_.size(0) == target_.size(0),
                    "TensorDataset: data and target must have the same number of rows (dimension 0), got ",
                    data_.sizes(), " and ", target_.sizes());
}

Batch TensorDataset::get(int64_t index) const { return {data_[index], target_[index]}; }

Batch TensorDataset::get_batch(const torch::Tensor& indices) const {
  return {data_.index_select(0, indices), target_.index_select(0, indices)};
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  COHORT_CHECK_KIND(kInvalidArgument, dataset_ != nullptr, "DataLoader: the dataset is null");
  COHORT_CHECK_KIND(kInvalidArgument, options_.batch_size() >= 1, "LoaderOptions.batch_size ", options_.batch_size(),
                    " is not accepted: expected an integer >= 1");
  COHORT_CHECK_KIND(kInvalidArgument, options_.num_workers() >= 0 && options_.num_workers() <= 256,
                    "LoaderOptions.num_workers ", options_.num_workers(),
                    " is not accepted: expected an integer from 0 to 256");
  COHORT_CHECK_KIND(kInvalidArgument, options_.prefetch_factor() >= 1, "LoaderOptions.prefetch_factor ",
                    options_.prefetch_factor(), " is not accepted: expected an integer >= 1");
  distribute(1, 0, !options_.shuffle(), 0);
}

void DataLoader::distribute(int replicas, int rank, bool evaluation, int64_t seed) {
  SamplerOptions sampler = SamplerOptions().num_replicas(replicas).rank(rank).seed(seed).drop_last_batch(
      options_.drop_last());
  if (evaluation) {
    sampler.shuffle(false).exact_split(true);
  } else {
    sampler.shuffle(options_.shuffle());
  }
  sampler_.emplace(dataset_->size(), sampler);
}

void DataLoader::distribute_unpadded(int replicas, int rank, int64_t seed) {
  sampler_.emplace(dataset_->size(), SamplerOptions()
                                         .num_replicas(replicas)
                                         .rank(rank)
                                         .seed(seed)
                                         .shuffle(options_.shuffle())
                                         .exact_split(true)
                                         .drop_last_batch(options_.drop_last()));
}

void DataLoader::set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }
DistributedSampler& DataLoader::sampler() { return *sampler_; }
int64_t DataLoader::num_batches() const { return sampler_->num_batches(options_.batch_size()); }

namespace {

// Batches [first, end) fetched by `workers` threads, at most `ahead` beyond the one consumed.
class Prefetcher {
 public:
  Prefetcher(const Dataset& dataset, std::vector<torch::Tensor> batches, int64_t first, int workers, int64_t ahead)
      : dataset_(dataset), batches_(std::move(batches)), next_(first), ahead_(ahead) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w, first, workers] { run(first + w, workers); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
    }
    changed_.notify_all();
    for (auto& thread : threads_) thread.join();
  }

  Batch take(int64_t index) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return ready_.count(index) > 0; });
    Slot slot = std::move(ready_[index]);
    ready_.erase(index);
    next_ = index + 1;
    changed_.notify_all();
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  void run(int64_t index, int stride) {
    for (; index < static_cast<int64_t>(batches_.size()); index += stride) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return cancelled_ || index < next_ + ahead_; });
        if (cancelled_) return;
      }
      Slot slot;
      try {
        slot.batch = dataset_.get_batch(batches_[index]);
      } catch (...) {
        slot.error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      ready_[index] = std::move(slot);
      changed_.notify_all();
    }
  }

  const Dataset& dataset_;
  std::vector<torch::Tensor> batches_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Slot> ready_;
  int64_t next_;
  int64_t ahead_;
  bool cancelled_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

void DataLoader::for_each(int64_t first, const std::function<bool(int64_t, Batch&)>& body) {
  std::vector<torch::Tensor> batches = sampler_->batch_tensors(options_.batch_size());
  const auto count = static_cast<int64_t>(batches.size());
  if (options_.num_workers() == 0) {
    for (int64_t index = first; index < count; ++index) {
      Batch batch = dataset_->get_batch(batches[index]);
      if (!body(index, batch)) return;
    }
    return;
  }
  const int64_t ahead = int64_t(options_.num_workers()) * options_.prefetch_factor();
  Prefetcher prefetcher(*dataset_, std::move(batches), first, options_.num_workers(), ahead);
  for (int64_t index = first; index < count; ++index) {
    Batch batch = prefetcher.take(index);
    if (!body(index, batch)) return;
  }
}

}  // namespace cohort
