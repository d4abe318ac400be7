// The optimizer's swap file: masters, their state and gradient shards (optimizer_file.h).
#include "zero/offload/optimizer_file.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "core/check.h"
#include "zero/offload/swapper_options.h"

namespace cohort::detail {

OptimizerFile::OptimizerFile(const EngineSettings& settings) : settings_(settings) {
  if (settings_.placement.masters == Tier::kFile)
    swapper_ = std::make_unique<StateSwapper>(swapper_options_of(
        settings_, settings_.config.zero_optimization().offload_optimizer(), "offload_optimizer", "optimizer"));
}

void OptimizerFile::add_group(torch::Tensor& master, torch::Tensor& shard_grad) {
  if (!active()) return;
  // Decided at the first group: the gradient shards are on the CPU (a CPU run) or not.
  if (groups_.empty()) gradients_ = settings_.stage >= 2 && shard_grad.defined() && shard_grad.device().is_cpu();
  // DeepSpeed steps and swaps stage 3's optimizer in sub-groups of at most sub_group_size elements;
  // here a group is a sharding unit's shard, so the bound is kept by refusing a larger unit.
  const int64_t bound = settings_.config.zero_optimization().sub_group_size();
  COHORT_CHECK_KIND(kInvalidArgument, settings_.stage != 3 || master.numel() <= bound,
                    "zero_optimization.sub_group_size: group ", groups_.size(), "'s shard has ", master.numel(),
                    " elements on rank ", settings_.rank, ", more than a sub-group (", bound,
                    "): cohort steps and swaps one sharding unit's shard at a time; raise sub_group_size or mark "
                    "smaller sharding units");
  Slots slots;
  slots.master = swapper_->add_slot({master});
  if (gradients_) slots.gradient = swapper_->add_slot({shard_grad});
  groups_.push_back(slots);
}

void OptimizerFile::add_state(int64_t g, std::vector<torch::Tensor> state) {
  if (!active() || state.empty()) return;
  Slots& slots = groups_[size_t(g)];
  COHORT_CHECK_KIND(kInternal, slots.state < 0, "offload: group ", g, "'s optimizer state is on file already");
  slots.state = swapper_->add_slot(std::move(state));
  swapper_->lend(slots.state);  // the master is lent: so is its state from here on, until both go back
}

void OptimizerFile::prefetch(int64_t g) {
  if (!active() || g >= int64_t(groups_.size())) return;
  const Slots& slots = groups_[size_t(g)];
  swapper_->prefetch(slots.master);
  if (slots.state >= 0) swapper_->prefetch(slots.state);
  if (slots.gradient >= 0) swapper_->prefetch(slots.gradient);
}

void OptimizerFile::prefetch_after(int64_t g) {
  const int64_t ahead = settings_.config.zero_optimization().offload_optimizer().buffer_count();
  for (int64_t next = g + 1; next <= g + ahead; ++next) prefetch(next);
}

void OptimizerFile::prefetch_gradients_after(int64_t g) {
  const int64_t ahead = settings_.config.zero_optimization().offload_optimizer().buffer_count();
  for (int64_t next = g + 1; next <= g + ahead; ++next) prefetch_gradient(next);
}

void OptimizerFile::lend(int64_t g) {
  if (!active()) return;
  const Slots& slots = groups_[size_t(g)];
  swapper_->lend(slots.master);
  if (slots.state >= 0) swapper_->lend(slots.state);
}

void OptimizerFile::give_back(int64_t g, bool changed) {
  if (!active()) return;
  const Slots& slots = groups_[size_t(g)];
  swapper_->give_back(slots.master, changed);
  if (slots.state >= 0) swapper_->give_back(slots.state, changed);
}

void OptimizerFile::open_gradient(int64_t g, bool clean) {
  if (!gradients_) return;
  const StateSwapper::Slot slot = groups_[size_t(g)].gradient;
  if (!clean) {
    swapper_->lend(slot);
    return;
  }
  swapper_->lend_to_overwrite(slot);
  swapper_->zero(slot);
}

void OptimizerFile::close_gradient(int64_t g) {
  if (gradients_) swapper_->give_back(groups_[size_t(g)].gradient, /*changed=*/true);
}

void OptimizerFile::prefetch_gradient(int64_t g) {
  if (gradients_ && g < int64_t(groups_.size())) swapper_->prefetch(groups_[size_t(g)].gradient);
}

void OptimizerFile::lend_gradient(int64_t g) {
  if (gradients_) swapper_->lend(groups_[size_t(g)].gradient);
}

void OptimizerFile::give_back_gradient(int64_t g) {
  if (gradients_) swapper_->give_back(groups_[size_t(g)].gradient, /*changed=*/false);
}

void OptimizerFile::flush() {
  if (active()) swapper_->flush();
}

void OptimizerFile::add_memory(MemoryReport& report) const {
  if (!active()) return;
  report.optimizer_bytes += swapper_->host_bytes();
  report.file_bytes += swapper_->file_bytes();
  report.file_io_bytes += swapper_->io().bytes_started();
  report.cached_bytes += swapper_->spare_bytes();
}

}  // namespace cohort::detail
