// Stage 3's parameter shards and their offload (parameter_shards.h).
#include "zero/offload/parameter_shards.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "core/check.h"
#include "zero/offload/swapper_options.h"

namespace cohort::detail {

ParameterShards::ParameterShards(const EngineSettings& settings) : settings_(settings) {
  if (settings_.placement.parameter_shards == Tier::kFile)
    swapper_ = std::make_unique<StateSwapper>(
        swapper_options_of(settings_, settings_.config.zero_optimization().offload_param(), "offload_param", "param"));
}

void ParameterShards::add(const torch::Tensor& shard) {
  torch::NoGradGuard no_grad;
  const auto& offload = settings_.config.zero_optimization().offload_param();
  const Tier tier = settings_.placement.parameter_shards;
  const int64_t g = size();
  if (tier == Tier::kDevice) {
    shards_.push_back(shard);
    slots_.push_back(-1);
    return;
  }
  torch::Tensor host = shard.to(torch::kCPU).contiguous();
  if (tier == Tier::kFile) {
    COHORT_CHECK_KIND(kInvalidArgument, shard.numel() <= offload.buffer_size(),
                      "zero_optimization.offload_param.buffer_size: group ", g, "'s parameter shard has ",
                      shard.numel(), " elements on rank ", settings_.rank, ", more than a buffer holds (",
                      offload.buffer_size(), "); raise buffer_size or mark smaller sharding units");
  }
  const bool stays = tier == Tier::kHost || in_memory_elements_ + shard.numel() <= offload.max_in_cpu();
  if (stays) {
    in_memory_elements_ += shard.numel();
    // Page-locked only when there is a device to copy to (a CPU-only LibTorch cannot pin).
    if (offload.pin_memory() && !shard.device().is_cpu()) host = host.pin_memory();
    shards_.push_back(host.is_same(shard) ? shard : host);
    slots_.push_back(-1);
    return;
  }
  if (host.is_same(shard)) host = shard.clone();  // the swapper empties what it takes
  shards_.push_back(host);
  slots_.push_back(swapper_->add_slot({shards_.back()}));
}

const torch::Tensor& ParameterShards::lend(int64_t g) {
  if (on_file(g)) swapper_->lend(slots_[size_t(g)]);
  return shards_[size_t(g)];
}

void ParameterShards::give_back(int64_t g) {
  if (on_file(g)) swapper_->give_back(slots_[size_t(g)], /*changed=*/false);
}

void ParameterShards::prefetch(int64_t g) {
  if (g >= 0 && g < size() && on_file(g)) swapper_->prefetch(slots_[size_t(g)]);
}

void ParameterShards::write(int64_t g, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  const bool file = on_file(g);
  // A gather lends a shard only until its all-gather is done, so none is lent at a step.
  COHORT_CHECK_KIND(kInternal, !file || !swapper_->lent(slots_[size_t(g)]), "offload_param: group ", g,
                    "'s shard is being gathered while the step writes it (rank ", settings_.rank, ")");
  if (file) swapper_->lend_to_overwrite(slots_[size_t(g)]);
  torch::Tensor& shard = shards_[size_t(g)];
  if (shard.data_ptr() != values.data_ptr()) shard.copy_(values);
  if (file) swapper_->give_back(slots_[size_t(g)], /*changed=*/true);
}

void ParameterShards::flush() {
  if (swapper_) swapper_->flush();
}

void ParameterShards::add_memory(MemoryReport& report) const {
  for (int64_t g = 0; g < size(); ++g)
    if (!on_file(g)) report.parameter_bytes += shards_[size_t(g)].numel() * int64_t(shards_[size_t(g)].element_size());
  if (!swapper_) return;  // lent shards are in the swapper's buffers
  report.parameter_bytes += swapper_->host_bytes();
  report.file_bytes += swapper_->file_bytes();
  report.file_io_bytes += swapper_->io().bytes_started();
  report.cached_bytes += swapper_->spare_bytes();
}

}  // namespace cohort::detail
