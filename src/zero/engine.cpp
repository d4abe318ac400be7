// The ZeRO engine (engine_impl.h): its parts built in order, and the calls that pass through more
// than one of them: a gradient becoming ready, backward, a forward of the whole model and the memory
// report.
#include "zero/engine_impl.h"

#include <torch/torch.h>

#include <algorithm>

#include <utility>

#include "cohort/error.h"
#include "comm/coalesced.h"
#include "core/check.h"
#include "core/log.h"
#include "world/malloc_policy.h"
#include "zero/unit_groups.h"

namespace cohort::detail {
namespace {

std::shared_ptr<torch::nn::Module> checked_model(std::shared_ptr<torch::nn::Module> module) {
  COHORT_CHECK_KIND(kInvalidArgument, module != nullptr, "cohort::initialize: the model is null");
  return module;
}

}  // namespace

ZeroEngineImpl::ZeroEngineImpl(std::shared_ptr<torch::nn::Module> module, ZeroConfig config, EngineOptions options)
    : module_(checked_model(std::move(module))), settings_(make_engine_settings(std::move(config), options)) {
  const int stage = settings_.stage;
  module_->to(settings_.compute_dtype);
  broadcast_model_state();
  const auto sharded_shapes = construction_shapes(*module_);
  COHORT_CHECK_KIND(kInvalidArgument, sharded_shapes.empty() || stage == 3,
                    "ZeRO engine: the model's units were sharded when they were "
                    "made (cohort::ShardedInit), which needs zero_optimization.stage 3, got stage ",
                    stage);
  params_ = std::make_unique<TrainableParameters>(*module_, sharded_shapes);
  store_ = std::make_unique<StateStore>(settings_, *params_);
  std::vector<GroupLayout> layouts;
  if (stage == 3) {
    UnitGroups units = group_units(plan_engine_units(module_, options), *params_, settings_);
    layouts = std::exchange(units.layouts, {});  // the store keeps them; the coordinator reads them there
    auto launched = [this](int64_t g) { return scheduler_->launched_in_backward(g); };
    coordinator_ = std::make_unique<UnitCoordinator>(settings_, std::move(units),
                                                     UnitCoordinator::Parts{*params_, *store_, launched});
  } else {
    std::vector<int64_t> numels;
    for (const auto& p : params_->tensors()) numels.push_back(p.numel());
    layouts = group_by_size(numels, settings_.config.zero_optimization().reduce_bucket_size(), settings_.world);
  }
  // Hooks first: autograd takes a parameter's gradient shape from it when the hook's accumulator is
  // made, and build_groups frees stage 3's parameters.
  if (!sharded_shapes.empty()) params_->show_whole_shapes(sharded_shapes);
  hooks_ = GradHookSet(params_->tensors(), [this](int64_t index) { on_gradient_ready(index); });
  build_groups(std::move(layouts));
  scheduler_ = std::make_unique<ReduceScheduler>(settings_, *params_, *store_);
  std::unique_ptr<ModelParallelNorm> model_parallel;
  if (options.model_parallel_comm() || !options.model_parallel_replicated().empty())
    model_parallel = std::make_unique<ModelParallelNorm>(settings_, *store_, *params_, options);
  optimizer_ = std::make_unique<ShardOptimizer>(settings_, *store_, options, std::move(model_parallel));
  checkpoint_ = std::make_unique<EngineCheckpoint>(settings_,
                                                   EngineCheckpoint::Parts{*module_, *params_, *store_, *optimizer_});
  return_free_memory();  // the parameters' former storage (the whole model at stage 3) is free now
  COHORT_DEBUG("ZeRO engine: stage ", stage, ", ", store_->size(), " group(s), ", params_->size(),
               " trainable parameter(s), compute dtype ", c10::toString(settings_.compute_dtype));
}

ZeroEngineImpl::~ZeroEngineImpl() = default;

// Every rank starts from rank 0's parameters and buffers, as DDP and DeepSpeed do. Under HSDP over the
// replicas first, then the shard group: every rank ends with one rank's values, however the groups are
// ordered.
void ZeroEngineImpl::broadcast_model_state() {
  std::vector<torch::Tensor> state;
  for (const auto& p : module_->parameters()) state.push_back(p);
  for (const auto& b : module_->buffers()) state.push_back(b);
  if (settings_.replicas > 1) {
    check_replicas();
    broadcast_coalesced(*settings_.replicate, state, 0);
  }
  if (settings_.world > 1) broadcast_coalesced(*settings_.comm, state, 0);
}

// A replica group pairs the same shard of equal shard groups: else each rank would average another
// rank's slice into its own.
void ZeroEngineImpl::check_replicas() const {
  const torch::Tensor mine = torch::tensor({int64_t(settings_.world), int64_t(settings_.rank)}, torch::kLong);
  torch::Tensor all = torch::empty({2 * settings_.replicas}, torch::kLong);
  settings_.replicate->allgather_async(all, mine).wait();
  for (int r = 0; r < settings_.replicas; ++r) {
    const int64_t world = all[2 * r].item<int64_t>(), rank = all[2 * r + 1].item<int64_t>();
    COHORT_CHECK_KIND(kInvalidArgument, world == settings_.world && rank == settings_.rank,
                      "EngineOptions::replicate_comm: its rank ", r, " is rank ", rank, " of a shard group of ", world,
                      ", this rank is rank ", settings_.rank, " of ", settings_.world,
                      ": replicas must hold the same shard of equal shard groups (one rank per shard group)");
  }
}

void ZeroEngineImpl::build_groups(std::vector<GroupLayout> layouts) {
  const auto options = params_->at(0).options().requires_grad(false);
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < layouts.size(); ++g) {
    // Stage 3: one group's shard at a time, its parameters freed before the next is cut.
    torch::Tensor shard = coordinator_ ? coordinator_->initial_shard(int64_t(g), layouts[g], options) : torch::Tensor();
    store_->add_group(std::move(layouts[g]), shard);
  }
}

void ZeroEngineImpl::on_gradient_ready(int64_t param) {
  const int64_t g = scheduler_->gradient_ready(param);
  if (g < 0) return;
  if (coordinator_ != nullptr) coordinator_->after_unit_backward(g);
  scheduler_->launch_ready();
}

void ZeroEngineImpl::backward(const torch::Tensor& loss) {
  COHORT_CHECK_KIND(kInvalidArgument, loss.defined() && loss.numel() == 1,
                    "engine.backward: the loss must be a single value, got ",
                    loss.defined() ? loss.sizes() : c10::IntArrayRef{});
  // Stage 2/3 reduce every backward; stage 0/1 only at the boundary (until then gradients
  // accumulate in flat_grad). Either way a group is reduced as soon as its gradients are ready.
  if (settings_.stage >= 2 || optimizer_->at_boundary()) scheduler_->begin_backward();
  struct EndBackward {
    ReduceScheduler& scheduler;
    ~EndBackward() { scheduler.end_backward(); }
  } end_backward{*scheduler_};
  // DeepSpeed scales by 1/gradient_accumulation_steps so accumulated gradients are a mean, and
  // multiplies in fp32 so the scale itself cannot overflow the loss.
  const double factor = optimizer_->loss_scale() / settings_.gas;
  torch::Tensor scaled = loss.to(torch::kFloat);
  if (factor != 1.0) scaled = scaled * factor;
  scaled.backward();
  if (!scheduler_->in_backward()) return;
  scheduler_->finish();
  if (coordinator_ != nullptr) coordinator_->release_all();
}

// Both engines must lay the parameter out alike for their shards to line up: alone in its flat group
// (a stage-3 unit of its own), of the same size, sharded over as many ranks (checked over `comm`).
void ZeroEngineImpl::sum_tied_gradient(const std::string& name, Comm& comm) {
  const auto& names = params_->names();
  const auto found = std::find(names.begin(), names.end(), name);
  COHORT_CHECK_KIND(kInvalidArgument, found != names.end(), "ZeRO engine: no trainable parameter '", name,
                    "' to sum with its tied twin");
  const int64_t g = store_->group_of(int64_t(found - names.begin()));
  const GroupLayout& layout = store_->layout(g);
  // Every holder learns every holder's layout first, so that all of them refuse together.
  const bool alone = layout.params.size() == 1, offloaded = store_->gradients_on_host() || store_->masters_on_file();
  auto mine = torch::tensor({int64_t(alone), int64_t(offloaded), layout.padded, int64_t(settings_.world)},
                            torch::kLong);
  const auto all = comm.allgather(mine);
  std::string seen;
  bool agree = true;
  for (int64_t r = 0; r < all.size(0); ++r) {
    const auto row = all[r];
    agree = agree && row[0].item<int64_t>() == 1 && row[1].item<int64_t>() == 0 && row.equal(all[0]);
    seen += std::string(r ? "; " : "") + (row[0].item<int64_t>() ? "alone" : "shares its flat group") +
            (row[1].item<int64_t>() ? ", offloaded" : "") + ", " + std::to_string(row[2].item<int64_t>()) +
            " padded elements over " + std::to_string(row[3].item<int64_t>()) + " rank(s)";
  }
  COHORT_CHECK_KIND(kInvalidArgument, agree, "ZeRO engine: parameter '", name,
                    "' is tied across engines that do not lay it out alike (", seen,
                    "): each must hold it alone in a flat group (at stage 3 a unit of its own; stages 1 and 2 "
                    "group by reduce_bucket_size), in memory, over as many ranks");
  torch::Tensor grad = store_->reduced_gradient(g);
  comm.allreduce(grad);
  if (settings_.stage >= 2) store_->gradients(g).shard_grad_clean = false;
}

void ZeroEngineImpl::begin_forward() {
  if (coordinator_ != nullptr) coordinator_->begin_forward();
}

void ZeroEngineImpl::end_forward() noexcept {
  if (coordinator_ != nullptr) coordinator_->end_forward();
}

torch::Tensor ZeroEngineImpl::to_compute(const torch::Tensor& t) const {
  if (!t.defined() || !t.is_floating_point() || t.scalar_type() == settings_.compute_dtype) return t;
  return t.to(settings_.compute_dtype);
}

// Each part adds what it holds: the store its state and idle blocks, the optimizer its state, the
// scheduler the gradients in flight, the coordinator the gathered units.
MemoryReport ZeroEngineImpl::memory_report() const {
  MemoryReport report;
  report.num_parameters = params_->total_numel();
  store_->add_memory(report);
  optimizer_->add_memory(report);
  scheduler_->add_memory(report);
  if (coordinator_ != nullptr) coordinator_->add_memory(report);
  return report;
}

}  // namespace cohort::detail
