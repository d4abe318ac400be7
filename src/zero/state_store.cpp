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

// The part of a group's flat parameters that rank `rank` updates.
torch::Tensor owned_slice(const torch::Tensor& flat, const GroupLayout& layout, int stage, int rank) {
  if (stage == 0 || stage == 3) return flat;
  auto [begin, end] = layout.owned(rank);
  return flat.narrow(0, begin, end - begin);
}

}  // namespace

StateStore::StateStore(const EngineSettings& settings, TrainableParameters& params)
    : settings_(settings), params_(params), group_of_(size_t(params.size()), -1), grad_aliases_(size_t(params.size())) {
  if (settings_.placement.masters == Tier::kFile)
    swapper_ = std::make_unique<StateSwapper>(optimizer_swapper_options());
}

SwapperOptions StateStore::optimizer_swapper_options() const {
  const auto& offload = settings_.config.zero_optimization().offload_optimizer();
  const AioConfig& aio = settings_.config.aio();
  SwapperOptions options;
  options.directory = offload.nvme_path();
  options.key = "offload_optimizer.nvme_path";
  options.what = "optimizer";
  options.rank = settings_.rank;
  options.aio = AioOptions{aio.block_size(), aio.queue_depth(), aio.single_submit(), aio.overlap_events()};
  options.buffer_count = offload.buffer_count();
  return options;
}

torch::Device StateStore::device_of(Tier tier) const {
  return tier == Tier::kDevice ? params_.at(0).device() : torch::Device(torch::kCPU);
}

void StateStore::add_group(GroupLayout layout, const torch::Tensor& shard) {
  const int stage = settings_.stage;
  const auto options = params_.at(0).options().requires_grad(false);
  torch::NoGradGuard no_grad;
  Group group;
  group.layout = std::move(layout);
  const GroupLayout& l = group.layout;
  for (int64_t index : l.params) group_of_[size_t(index)] = size();
  if (stage == 3) {
    group.flat = shard;
    group.grads.shard_grad = torch::zeros({l.shard}, options);
    params_.free(l);  // now, not after every group: the whole model never exists twice
  } else {
    group.flat = params_.flatten(l, options);
    params_.alias_into(l, group.flat);
    if (stage == 2) {
      group.grads.shard_grad = torch::zeros({l.shard}, options);
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
  torch::Tensor owned = owned_slice(group.flat, l, stage, settings_.rank);
  group.master = settings_.separate_master || swapper_ || owned.device() != master_options.device()
                     ? owned.to(master_options, /*non_blocking=*/false, /*copy=*/true)
                     : owned;
  if (swapper_) group.master_slot = swapper_->add_slot({group.master});  // on file from here on
  groups_.push_back(std::move(group));
}

void StateStore::prefetch_master(int64_t g) {
  if (!swapper_ || g >= size()) return;
  const Group& group = groups_[size_t(g)];
  swapper_->prefetch(group.master_slot);
  if (group.state_slot >= 0) swapper_->prefetch(group.state_slot);
}

void StateStore::lend_master(int64_t g) {
  if (!swapper_) return;
  const Group& group = groups_[size_t(g)];
  swapper_->lend(group.master_slot);
  if (group.state_slot >= 0) swapper_->lend(group.state_slot);
}

void StateStore::give_back_master(int64_t g, bool changed) {
  if (!swapper_) return;
  const Group& group = groups_[size_t(g)];
  swapper_->give_back(group.master_slot, changed);
  if (group.state_slot >= 0) swapper_->give_back(group.state_slot, changed);
}

void StateStore::add_master_state(int64_t g, std::vector<torch::Tensor> state) {
  if (!swapper_ || state.empty()) return;
  Group& group = groups_[size_t(g)];
  COHORT_CHECK_KIND(kInternal, group.state_slot < 0, "offload: group ", g, "'s optimizer state is on file already");
  group.state_slot = swapper_->add_slot(std::move(state));
  // The master is lent: so is its state from here on, until both go back.
  swapper_->lend(group.state_slot);
}

bool StateStore::master_lent(int64_t g) const { return swapper_ && swapper_->lent(groups_[size_t(g)].master_slot); }

void StateStore::flush_masters() {
  if (swapper_) swapper_->flush();
}

void StateStore::hold_all_masters() {
  if (!swapper_ || held_) return;
  for (int64_t g = 0; g < size(); ++g) lend_master(g);
  held_ = true;
  held_changed_ = false;
}

void StateStore::release_held_masters(bool changed) {
  if (!held_) return;
  for (int64_t g = 0; g < size(); ++g) give_back_master(g, changed || held_changed_);
  held_ = false;
  held_changed_ = false;
}

torch::Tensor StateStore::owned_parameters(int64_t g) const {
  const Group& group = groups_[size_t(g)];
  return owned_slice(group.flat, group.layout, settings_.stage, settings_.rank);
}

bool StateStore::master_is_copy(int64_t g) const {
  const Group& group = groups_[size_t(g)];
  return settings_.separate_master || swapper_ || group.master.device() != group.flat.device();
}

const torch::Tensor& StateStore::reduced_gradient(int64_t g) const {
  const GroupGradients& grads = groups_[size_t(g)].grads;
  // Stage 0 reduced the whole flat gradient; stage 1 on one rank has nothing to scatter.
  if (settings_.stage == 0 || (settings_.stage == 1 && settings_.world == 1)) return grads.flat_grad;
  return grads.shard_grad;
}

void StateStore::zero_gradients() {
  for (auto& group : groups_) {
    group.master.mutable_grad() = torch::Tensor();
    if (group.grads.flat_grad.defined()) group.grads.flat_grad.zero_();
    if (settings_.stage >= 2) {
      group.grads.shard_grad.zero_();
      group.grads.shard_grad_clean = true;
    } else {
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
    const bool lend = swapper_ && !swapper_->lent(group.master_slot);
    if (lend) lend_master(g);
    group.master.narrow(0, real, group.master.numel() - real).zero_();
    if (lend) give_back_master(g, /*changed=*/true);
  }
}

void StateStore::add_memory(MemoryReport& report) const {
  for (int64_t g = 0; g < size(); ++g) {
    const Group& group = groups_[size_t(g)];
    report.parameter_bytes += tensor_bytes(group.flat);
    report.gradient_bytes += tensor_bytes(group.grads.flat_grad) + tensor_bytes(group.grads.shard_grad);
    if (master_is_copy(g) && !swapper_) report.optimizer_bytes += tensor_bytes(group.master);
  }
  if (swapper_) {  // lent masters and state, reads ahead, writes behind; the rest is on file
    report.optimizer_bytes += swapper_->host_bytes();
    report.file_bytes += swapper_->file_bytes();
  }
  report.cached_bytes = buffers_.idle_bytes();
}

}  // namespace cohort::detail
