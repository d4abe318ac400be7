// cohort::ShardedInit (include/cohort/zero.h): DeepSpeed's zero.Init for units marked with
// cohort::fully_shard. Each unit is sharded the moment it is made: its trainable parameters are
// broadcast from rank 0 (every rank then holds rank 0's initialisation, as the engine's own
// broadcast would give), this rank copies its slice of their flat layout (partition.h, the layout
// the stage 3 engine gives the unit's group) and the parameters are emptied. The engine adopts the
// slice (UnitCoordinator::initial_shard) instead of flattening a whole model that never existed.
#include <torch/torch.h>

#include <unordered_set>

#include "cohort/error.h"
#include "cohort/zero.h"
#include "comm/coalesced.h"
#include "core/units.h"
#include "world/malloc_policy.h"
#include "world/resolve_comm.h"
#include "zero/partition.h"

namespace cohort {
namespace {

// Parameters already sharded by units nested in `unit` (made before it): they belong to those.
std::unordered_set<const c10::TensorImpl*> nested_shards(const torch::nn::Module& unit) {
  std::unordered_set<const c10::TensorImpl*> taken;
  for (const auto& module : unit.modules(/*include_self=*/false)) {
    auto state = detail::find_unit(*module);
    if (state == nullptr || state->construction_shard() == nullptr) continue;
    for (const auto& p : state->construction_shard()->params) taken.insert(p.unsafeGetTensorImpl());
  }
  return taken;
}

// This rank's slice [begin, end) of the parameters laid out back to back at `offsets`, padding zero.
torch::Tensor slice_of(const std::vector<torch::Tensor>& params, const detail::GroupLayout& layout, int rank) {
  const auto [begin, end] = layout.owned(rank);
  torch::Tensor shard = torch::zeros({layout.shard}, params[0].options().requires_grad(false));
  for (size_t k = 0; k < params.size(); ++k) {
    const int64_t first = std::max(begin, layout.offsets[k]);
    const int64_t last = std::min(end, layout.offsets[k] + params[k].numel());
    if (first >= last) continue;
    shard.narrow(0, first - begin, last - first)
        .copy_(params[k].detach().reshape(-1).narrow(0, first - layout.offsets[k], last - first));
  }
  return shard;
}

}  // namespace

class ShardedInit::Sharder : public detail::UnitSharder {
 public:
  Sharder(std::shared_ptr<Comm> comm, std::shared_ptr<Comm> replicate)
      : comm_(std::move(comm)), replicate_(std::move(replicate)) {}

  std::shared_ptr<detail::ConstructionShard> shard(const detail::UnitState& unit) override {
    auto record = std::make_shared<detail::ConstructionShard>();
    const auto taken = nested_shards(unit.module());
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& p : unit.module().parameters()) {
      if (!p.requires_grad() || taken.count(p.unsafeGetTensorImpl()) || !seen.insert(p.unsafeGetTensorImpl()).second)
        continue;
      record->params.push_back(p);
      record->shapes.push_back(p.sizes().vec());
    }
    if (record->params.empty()) return nullptr;  // nothing to shard (the engine gives it no group)
    record->world_size = comm_->size();
    record->rank = comm_->rank();
    record->replicas = replicate_ ? replicate_->size() : 1;
    torch::NoGradGuard no_grad;
    // Over the replicas first: then every rank ends with one rank's values, however the groups are ordered.
    if (record->replicas > 1) detail::broadcast_coalesced(*replicate_, record->params, 0);
    if (comm_->size() > 1) detail::broadcast_coalesced(*comm_, record->params, 0);
    std::vector<int64_t> numels;
    for (const auto& p : record->params) numels.push_back(p.numel());
    const auto layout = detail::group_by_unit(numels, std::vector<int64_t>(numels.size(), 0), comm_->size())[0];
    record->shard = slice_of(record->params, layout, comm_->rank());
    for (auto& p : record->params) p.set_data(torch::empty({0}, p.options().requires_grad(false)));
    // Now, not once the model is made: the unit's whole parameters and the broadcast's flat buffer
    // are free, but the shard cut after them pins the heap above their hole, so under cohort's malloc
    // policy the next unit's did not fit there and the heap grew by about a unit each time (a 24-block
    // GPT of width 1024 peaked at 1125 MiB a rank while it was made, 454 MiB after).
    detail::return_free_memory();
    return record;
  }

  std::shared_ptr<Comm> comm_;
  std::shared_ptr<Comm> replicate_;  // HSDP: null, or the replicas of this rank's shard
  detail::UnitSharder* previous_ = nullptr;
};

ShardedInit::ShardedInit(ShardedInitOptions options)
    : sharder_(std::make_unique<Sharder>(detail::resolve_comm(options.comm(), "cohort::ShardedInit"),
                                         options.replicate_comm())) {
  sharder_->previous_ = detail::install_unit_sharder(sharder_.get());
  if (sharder_->previous_ != nullptr) {
    detail::install_unit_sharder(sharder_->previous_);
    throw Error("cohort::ShardedInit: another ShardedInit is alive on this thread; make the model inside one",
                ErrorKind::kInvalidArgument);
  }
}

ShardedInit::~ShardedInit() {
  detail::install_unit_sharder(sharder_->previous_);
  detail::return_free_memory();  // the units' whole parameters, built one at a time, are gone
}

}  // namespace cohort
