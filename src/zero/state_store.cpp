// The ZeRO engine's state store (state_store.h): the flat groups built from the parameters, and the
// clearing of gradients and padding the step and a checkpoint load need.
#include "zero/state_store.h"

#include <torch/torch.h>

#include <algorithm>

#include "cohort/error.h"
#include "core/check.h"
#include "core/grad_kit.h"

namespace cohort::detail {
namespace {

// The page-locked staging of offload_optimizer cpu on a GPU: buffer_count buffers of at most this.
constexpr int64_t kStagingSlotBytes = int64_t(64) << 20;

// The part of a group's flat parameters that rank `rank` updates.
torch::Tensor owned_slice(const torch::Tensor& flat, const GroupLayout& layout, int stage, int rank) {
  if (stage == 0 || stage == 3) return flat;
  auto [begin, end] = layout.owned(rank);
  return flat.narrow(0, begin, end - begin);
}

}  // namespace

StateStore::StateStore(const EngineSettings& settings, TrainableParameters& params)
    : settings_(settings),
      params_(params),
      group_of_(size_t(params.size()), -1),
      grad_aliases_(size_t(params.size())),
      shards_(settings),
      optimizer_file_(settings) {
  const bool host_masters = settings_.placement.masters == Tier::kHost;
  if (host_masters && settings_.stage >= 1 && params.size() > 0 && params.at(0).is_cuda())
    staging_ = std::make_unique<HostStaging>(params.at(0).device(),
                                             settings_.config.zero_optimization().offload_optimizer().buffer_count(),
                                             kStagingSlotBytes);
}

torch::Device StateStore::device_of(Tier tier) const {
  return tier == Tier::kDevice ? params_.at(0).device() : torch::Device(torch::kCPU);
}

void StateStore::add_group(GroupLayout layout, const torch::Tensor& shard) {
  const int stage = settings_.stage;
  const auto options = parameter_options();
  torch::NoGradGuard no_grad;
  Group group;
  group.layout = std::move(layout);
  const GroupLayout& l = group.layout;
  for (int64_t index : l.params) group_of_[size_t(index)] = size();
  // Gradients on the host: the reduced shard in fp32 there, written by receive_gradient.
  const auto shard_grad_options = staging_ ? options.dtype(torch::kFloat).device(torch::kCPU) : options;
  if (staging_ && stage == 1) group.grads.shard_grad = torch::zeros({l.shard}, shard_grad_options);
  if (stage == 3) {
    group.grads.shard_grad = torch::zeros({l.shard}, shard_grad_options);
    params_.free(l);  // now, not after every group: the whole model never exists twice
  } else {
    group.flat = params_.flatten(l, options);
    params_.alias_into(l, group.flat);
    if (stage == 2) {
      group.grads.shard_grad = torch::zeros({l.shard}, shard_grad_options);
    } else {
      group.grads.flat_grad = torch::zeros({l.padded}, options);
      for (size_t k = 0; k < l.params.size(); ++k) {
        auto& param = params_.at(l.params[k]);
        grad_aliases_[size_t(l.params[k])] = flat_alias(group.grads.flat_grad, l.offsets[k], param.sizes());
        param.mutable_grad() = grad_aliases_[size_t(l.params[k])];
      }
    }
  }
  const auto master_options = options.dtype(torch::kFloat).device(device_of(settings_.placement.masters));
  torch::Tensor owned = stage == 3 ? shard : owned_slice(group.flat, l, stage, settings_.rank);
  // The master is the parameters themselves only where both stay together in fp32 (no offload).
  group.master_copy = settings_.separate_master || masters_on_file() || owned.device() != master_options.device() ||
                      (stage == 3 && settings_.placement.parameter_shards != Tier::kDevice);
  group.master = group.master_copy ? owned.to(master_options, /*non_blocking=*/false, /*copy=*/true) : owned;
  optimizer_file_.add_group(group.master, group.grads.shard_grad);  // nvme: on file from here on
  if (stage == 3) shards_.add(shard);
  groups_.push_back(std::move(group));
}

void StateStore::write_parameters(int64_t g, const torch::Tensor& master) {
  if (staging_ && master.is_cpu()) {
    const bool shard = settings_.stage == 3;
    if (!shard || settings_.placement.parameter_shards == Tier::kDevice) {
      // on the device: up through the staging (stage 3's shard there is never lent at a step)
      staging_->upload(master, shard ? shards_.lend(g) : owned_parameters(g));
      if (shard) shards_.give_back(g);
      return;
    }
  }
  if (settings_.stage == 3) {
    shards_.write(g, master);
    return;
  }
  torch::Tensor owned = owned_parameters(g);
  if (owned.data_ptr() != master.data_ptr()) owned.copy_(master);
}

torch::Tensor StateStore::owned_parameters(int64_t g) const {
  const Group& group = groups_[size_t(g)];
  return owned_slice(group.flat, group.layout, settings_.stage, settings_.rank);
}

bool StateStore::master_is_copy(int64_t g) const { return groups_[size_t(g)].master_copy; }

void StateStore::receive_gradient(int64_t g, const torch::Tensor& reduced, bool accumulate) {
  staging_->download(reduced, groups_[size_t(g)].grads.shard_grad, accumulate);
}

void StateStore::gradients_received() {
  if (staging_) staging_->drain();
}

void StateStore::parameters_written() {
  if (staging_) staging_->uploads_done();
}

const torch::Tensor& StateStore::reduced_gradient(int64_t g) const {
  const GroupGradients& grads = groups_[size_t(g)].grads;
  if (staging_) return grads.shard_grad;
  // Stage 0 reduced the whole flat gradient; stage 1 on one rank has nothing to scatter.
  if (settings_.stage == 0 || (settings_.stage == 1 && settings_.world == 1)) return grads.flat_grad;
  return grads.shard_grad;
}

void StateStore::zero_gradients() {
  for (auto& group : groups_) {
    group.master.mutable_grad() = torch::Tensor();
    if (group.grads.flat_grad.defined()) group.grads.flat_grad.zero_();
    if (settings_.stage >= 2) {
      // On file the shard is empty here; the next reduction lends it as zeros (clean). On the host
      // the next reduction copies rather than adds.
      if (!optimizer_file_.holds_gradients() && !staging_) group.grads.shard_grad.zero_();
      group.grads.shard_grad_clean = true;
    } else if (!staging_) {
      group.grads.shard_grad = torch::Tensor();  // stage 1: the reduced shard lives for one step only
    }
  }
}

void StateStore::zero_master_padding() {
  torch::NoGradGuard no_grad;
  const int stage = settings_.stage;
  for (auto& group : groups_) {
    const int64_t begin = stage == 0 ? 0 : group.layout.owned(settings_.rank).first;
    const int64_t real_end = stage == 0 ? group.layout.numel : group.layout.owned_real(settings_.rank).second;
    const int64_t real = std::max<int64_t>(0, real_end - begin);
    const int64_t g = &group - groups_.data();
    const bool lend = masters_on_file() && !optimizer_file_.lent(g);
    if (lend) optimizer_file_.lend(g);
    group.master.narrow(0, real, group.master.numel() - real).zero_();
    if (lend) optimizer_file_.give_back(g, /*changed=*/true);
  }
}

void StateStore::add_memory(MemoryReport& report) const {
  for (int64_t g = 0; g < size(); ++g) {
    const Group& group = groups_[size_t(g)];
    report.parameter_bytes += tensor_bytes(group.flat);
    report.gradient_bytes += tensor_bytes(group.grads.flat_grad) + tensor_bytes(group.grads.shard_grad);
    if (master_is_copy(g) && !masters_on_file()) report.optimizer_bytes += tensor_bytes(group.master);
  }
  optimizer_file_.add_memory(report);  // lent, read ahead, written behind; the rest is on file
  shards_.add_memory(report);
  report.cached_bytes += buffers_.idle_bytes();
  if (staging_) report.buffer_bytes += staging_->pinned_bytes();
}

}  // namespace cohort::detail
