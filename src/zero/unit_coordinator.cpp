// ZeRO stage 3's unit coordinator (unit_coordinator.h): taking the units, their first shards, and
// gathering, prefetching and freeing their parameters around each unit's forward and backward.
#include "zero/unit_coordinator.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "cohort/activation_checkpoint.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "core/trace_recorder.h"
#include "zero/gathered_storage.h"

namespace cohort::detail {
namespace {

// Identity in forward; in backward, gathers the unit's parameters before autograd reaches the
// unit's own nodes (they depend on this node's output gradient).
class GatherBeforeBackward : public torch::autograd::Function<GatherBeforeBackward> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& output,
                               int64_t coordinator_handle, int64_t unit) {
    ctx->saved_data["engine"] = coordinator_handle;
    ctx->saved_data["unit"] = unit;
    return output.detach();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* coordinator = static_cast<UnitCoordinator*>(OwnerHandle::resolve(ctx->saved_data["engine"].toInt()));
    COHORT_CHECK_KIND(kInvalidArgument, coordinator != nullptr,
                      "ZeRO stage 3: backward reached a layer whose engine was destroyed after "
                      "forward; keep the engine alive until backward has finished");
    coordinator->before_unit_backward(ctx->saved_data["unit"].toInt());
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

UnitCoordinator::UnitCoordinator(const EngineSettings& settings, UnitGroups units, Parts parts)
    : settings_(settings), units_(std::move(units)), parts_(std::move(parts)), gathered_(units_.persistent.size()) {
  const auto& plan = units_.plan;
  for (size_t u = 1; u < plan.units.size(); ++u) {
    plan.units[u]->attach(this, int64_t(u));
    if (settings_.config.activation_checkpointing())
      plan.units[u]->set_options(UnitOptions(plan.units[u]->options()).activation_checkpointing(true));
  }
  ran_.assign(plan.units.size(), 0);
  check_tied_parameters();
  if (plan.units.size() == 1)
    COHORT_INFO(
        "ZeRO stage 3: the model marks no sharding units; all its parameters form one unit, gathered "
        "for the whole forward and backward (mark blocks with cohort::fully_shard, or set "
        "EngineOptions::unit_policy, to gather one block at a time)");
}

UnitCoordinator::~UnitCoordinator() {
  for (const auto& unit : units_.plan.units)
    if (unit != nullptr) unit->detach(this);
  for (const auto& route : units_.plan.routes) route.restore();
}

void UnitCoordinator::check_tied_parameters() const {
  const auto& names = units_.plan.names;
  for (const auto& [name, first] : parts_.params.tied()) {
    const auto units = unit_of_parameters({name, first}, names);
    COHORT_CHECK_KIND(kInvalidArgument, units[0] == units[1], "ZeRO stage 3: parameter '", name,
                      "' is the same tensor as '", first, "', but they belong to different units ('",
                      names[size_t(units[0])], "' and '", names[size_t(units[1])],
                      "'); a shared parameter must live in one unit: mark their common "
                      "parent instead, or leave the modules that share it outside the units (the root)");
  }
}

torch::Tensor UnitCoordinator::initial_shard(int64_t g, const GroupLayout& layout,
                                             const torch::TensorOptions& options) {
  torch::NoGradGuard no_grad;
  const auto& plan = units_.plan;
  const auto& group_of_unit = units_.group_of_unit;
  const auto unit = std::find(group_of_unit.begin(), group_of_unit.end(), g) - group_of_unit.begin();
  auto record = size_t(unit) < plan.units.size() && plan.units[size_t(unit)] != nullptr
                    ? plan.units[size_t(unit)]->construction_shard()
                    : nullptr;
  const int rank = settings_.rank, world = settings_.world;
  if (record == nullptr) {
    auto [begin, end] = layout.owned(rank);
    return parts_.params.flatten(layout, options).narrow(0, begin, end - begin).clone();
  }
  const std::string& name = plan.names[size_t(unit)];
  COHORT_CHECK_KIND(kInvalidArgument, record->shard.defined(), "ZeRO stage 3: unit '", name,
                    "' was sharded when it was made and an "
                    "earlier engine took its shard; build the model again for a new engine");
  COHORT_CHECK_KIND(kInvalidArgument, record->world_size == world && record->rank == rank, "ZeRO stage 3: unit '", name,
                    "' was sharded as rank ", record->rank, " of ", record->world_size,
                    " (cohort::ShardedInit) but the engine runs as rank ", rank, " of ", world,
                    "; give ShardedInitOptions and EngineOptions one Comm");
  COHORT_CHECK_KIND(kInvalidArgument, record->replicas == settings_.replicas, "ZeRO stage 3: unit '", name,
                    "' was made alike on ", record->replicas,
                    " replica(s) (ShardedInitOptions::replicate_comm) but the "
                    "engine averages over ",
                    settings_.replicas, " (EngineOptions::replicate_comm); give both the same replicate Comm");
  bool same = record->params.size() == layout.params.size();
  for (size_t k = 0; same && k < layout.params.size(); ++k)
    same = parts_.params.at(layout.params[k]).unsafeGetTensorImpl() == record->params[k].unsafeGetTensorImpl();
  COHORT_CHECK_KIND(kInvalidArgument, same, "ZeRO stage 3: unit '", name, "' was sharded with ", record->params.size(),
                    " parameter(s) when it was made, but the engine finds ", layout.params.size(),
                    " in it (a parameter changed requires_grad since, or was replaced); make such changes before "
                    "marking the unit");
  torch::Tensor shard = record->shard.to(options);
  record->shard = torch::Tensor();  // adopted: the store's flat shard from now on
  return shard;
}

void UnitCoordinator::gather(int64_t g) {
  Gathered& unit = gathered_[size_t(g)];
  if (unit.presence != Gathered::Presence::kFreed) return;
  const torch::Tensor& shard = parts_.store.shards().lend(g);  // read from file when offloaded there
  unit.shard_lent = true;
  const auto options = parts_.params.at(parts_.store.layout(g).params[0]).options().requires_grad(false);
  // offload_param cpu on a GPU: the shard goes up first (the gather runs on the device).
  unit.staged = shard.device() == options.device() ? shard : shard.to(options.device(), /*non_blocking=*/true);
  if (unit.gathered.defined()) parts_.store.buffers().refill(unit.gathered);
  else unit.gathered = parts_.store.buffers().empty(parts_.store.layout(g).padded, options);
  if (trace::enabled()) trace::record_mark("gather launch", "zero", "launch", int64_t(unit.gathered.nbytes()));
  unit.gather_work = settings_.comm->allgather_async(unit.gathered, unit.staged);
  unit.presence = Gathered::Presence::kGathering;
}

// The gather is done: the shard goes back to its place (on file: nothing to write, it only was read).
void UnitCoordinator::finish_gather(Gathered& unit, int64_t g) {
  unit.gather_work.wait();
  unit.gather_work = Work();
  unit.staged = torch::Tensor();
  if (std::exchange(unit.shard_lent, false)) parts_.store.shards().give_back(g);
}

void UnitCoordinator::ensure_gathered(int64_t g) {
  gather(g);
  Gathered& unit = gathered_[size_t(g)];
  if (unit.presence == Gathered::Presence::kGathered) return;
  {
    trace::ScopedSpan span("gather wait", "zero", "wait");  // the timeline: a gather forward waits on
    finish_gather(unit, g);
  }
  parts_.params.show_gathered(parts_.store.layout(g), unit.gathered);
  unit.presence = Gathered::Presence::kGathered;
}

void UnitCoordinator::release(int64_t g) {
  Gathered& unit = gathered_[size_t(g)];
  if (unit.presence == Gathered::Presence::kFreed) return;
  if (unit.presence == Gathered::Presence::kGathering) finish_gather(unit, g);
  parts_.params.free(parts_.store.layout(g));
  empty_storage(unit.gathered);
  unit.presence = Gathered::Presence::kFreed;
}

void UnitCoordinator::release_all() {
  for (size_t g = 0; g < gathered_.size(); ++g) release(int64_t(g));
}

int64_t UnitCoordinator::live_elements() const {
  int64_t live = 0;
  for (size_t g = 0; g < gathered_.size(); ++g)
    if (gathered_[g].presence != Gathered::Presence::kFreed) live += parts_.store.layout(int64_t(g)).padded;
  return live;
}

// Gathers ahead the units that follow `unit` in the last forward's order (direction +1) or precede
// it (-1, for backward), as many as the prefetch bucket (all the elements gathered ahead, as
// DeepSpeed's stage3_prefetch_bucket_size) and the live limit allow.
void UnitCoordinator::prefetch_after(int64_t unit, int direction) {
  const auto& zero = settings_.config.zero_optimization();
  const auto at = std::find(run_order_.begin(), run_order_.end(), unit);
  if (at == run_order_.end()) return;
  read_ahead(at, direction);
  if (zero.stage3_prefetch_bucket_size() == 0) return;
  int64_t budget = zero.stage3_prefetch_bucket_size();
  int64_t ahead = 0;  // units with parameters ahead of this one, gathered or being gathered
  for (auto i = (at - run_order_.begin()) + direction; i >= 0 && i < int64_t(run_order_.size()); i += direction) {
    const int64_t g = units_.group_of_unit[size_t(run_order_[size_t(i)])];
    // In backward a unit whose reduction was launched is done; the scheduler answers false outside
    // its backward (a forward once read a stale flag and prefetched nothing after the first step).
    if (g < 0 || units_.persistent[size_t(g)] || parts_.reduction_launched(g)) continue;
    if (settings_.prefetch_units > 0 && ahead++ >= settings_.prefetch_units) return;
    const int64_t size = parts_.store.layout(g).padded;
    // A unit gathered ahead already counts against the bucket: skipped for free, every unit's call
    // would gather a bucket more, and backward held 10 of 12 blocks at once (hostile to a memory cap).
    if (gathered_[size_t(g)].presence != Gathered::Presence::kFreed) {
      budget -= size;
      continue;
    }
    if (size > budget || live_elements() + size > zero.stage3_max_live_parameters()) return;
    budget -= size;
    gather(g);
  }
}

// offload_param nvme: starts reading the shards of the next units in run order (the swapper holds
// at most offload_param.buffer_count reads ahead), so the disk works while this unit computes.
void UnitCoordinator::read_ahead(std::vector<int64_t>::const_iterator from, int direction) {
  if (settings_.placement.parameter_shards != Tier::kFile) return;  // nothing to read: no walk per unit
  int64_t budget = settings_.config.zero_optimization().offload_param().buffer_count();
  for (auto i = (from - run_order_.begin()) + direction; budget > 0 && i >= 0 && i < int64_t(run_order_.size());
       i += direction) {
    const int64_t g = units_.group_of_unit[size_t(run_order_[size_t(i)])];
    if (g < 0 || units_.persistent[size_t(g)] || gathered_[size_t(g)].presence != Gathered::Presence::kFreed) continue;
    if (direction < 0 && parts_.reduction_launched(g)) continue;
    if (!parts_.store.shards().on_file(g)) continue;
    parts_.store.shards().prefetch(g);
    --budget;
  }
}

void UnitCoordinator::begin_forward() {
  in_forward_ = true;
  this_order_.clear();
  std::fill(ran_.begin(), ran_.end(), 0);
  if (units_.group_of_unit[0] >= 0) ensure_gathered(units_.group_of_unit[0]);
  if (!run_order_.empty()) prefetch_after(0, +1);
}

void UnitCoordinator::end_forward() noexcept {
  in_forward_ = false;
  run_order_ = this_order_;
  run_order_.insert(run_order_.begin(), 0);   // the root opens every forward
  if (torch::GradMode::is_enabled()) return;  // the parameters are needed again in backward
  try {
    release_all();  // evaluation: nothing stays gathered
  } catch (const std::exception& e) {
    COHORT_WARN("ZeRO stage 3: freeing gathered parameters after forward failed: ", e.what());
  }
}

void UnitCoordinator::before_forward(int64_t unit) {
  const int64_t g = units_.group_of_unit[size_t(unit)];
  const auto& names = units_.plan.names;
  if (in_recomputation()) {  // activation checkpointing runs the unit again inside its backward
    if (g >= 0) ensure_gathered(g);
    return;
  }
  COHORT_CHECK_KIND(kInvalidArgument, in_forward_, "ZeRO stage 3: unit '", names[size_t(unit)],
                    "' ran outside engine.forward(); "
                    "call the model through the engine (engine.forward(...) or engine.run_forward(fn)) so the "
                    "parameters outside the units are gathered too");
  COHORT_CHECK_KIND(kInvalidArgument, !ran_[size_t(unit)] || !torch::GradMode::is_enabled(), "ZeRO stage 3: unit '",
                    names[size_t(unit)],
                    "' ran twice in one forward; a unit's gradients are reduced when "
                    "its backward ends, so it may run once per step: give each use a unit of its own, or "
                    "leave the module in its parent's unit");
  ran_[size_t(unit)] = 1;
  this_order_.push_back(unit);
  if (g < 0) return;
  ensure_gathered(g);
  prefetch_after(unit, +1);
}

torch::Tensor UnitCoordinator::mark_output(int64_t unit, const torch::Tensor& output) {
  const int64_t g = units_.group_of_unit[size_t(unit)];
  if (g < 0 || !output.defined() || !output.requires_grad() || !torch::GradMode::is_enabled()) return output;
  return GatherBeforeBackward::apply(output, handle_.id(), unit);
}

void UnitCoordinator::after_forward(int64_t unit) noexcept {
  const int64_t g = units_.group_of_unit[size_t(unit)];
  if (g < 0 || in_recomputation() || units_.persistent[size_t(g)]) return;
  const auto& state = *units_.plan.units[size_t(unit)];
  const bool keep = torch::GradMode::is_enabled() && !state.options().reshard_after_forward();
  if (keep) return;
  try {
    release(g);
  } catch (const std::exception& e) {
    COHORT_WARN("ZeRO stage 3: freeing unit '", units_.plan.names[size_t(unit)], "' after forward failed: ", e.what());
  }
}

void UnitCoordinator::before_unit_backward(int64_t unit) {
  const int64_t g = units_.group_of_unit[size_t(unit)];
  if (g < 0) return;
  ensure_gathered(g);
  prefetch_after(unit, -1);  // the unit backward reaches next: the one forward ran before it
}

void UnitCoordinator::after_unit_backward(int64_t g) {
  if (g != units_.group_of_unit[0] && !units_.persistent[size_t(g)]) release(g);
}

void UnitCoordinator::add_memory(MemoryReport& report) const {
  for (const auto& unit : gathered_) report.buffer_bytes += storage_bytes(unit.gathered);
}

}  // namespace cohort::detail
