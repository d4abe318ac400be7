// The ZeRO engine: construction, gradient hooks and the reductions of backward (see engine_impl.h
// for the stages and the note "launch order"; engine_step.cpp has the optimizer step, stage3.cpp
// the parameter gathering, engine_state.cpp memory and checkpoint state).
#include <torch/torch.h>

#include "comm/coalesced.h"
#include "core/check.h"
#include "core/grad_kit.h"
#include "core/log.h"
#include "core/trace_recorder.h"
#include "world/malloc_policy.h"
#include "world/resolve_comm.h"
#include "zero/engine_impl.h"
#include "zero/inner_optimizer.h"

#include <unordered_map>

namespace cohort::detail {
namespace {

// Reductions a rank may have launched and not finished (FSDP2 keeps one in flight while the next
// unit's backward runs).
constexpr int64_t kMaxReductionsInFlight = 2;

torch::Dtype compute_dtype_of(const ZeroConfig& config) {
  COHORT_CHECK_KIND(kInvalidArgument, !(config.fp16().enabled() && config.bf16().enabled()),
                    "ZeRO engine: fp16.enabled and bf16.enabled are both true; choose one");
  if (config.fp16().enabled()) return torch::kHalf;
  if (config.bf16().enabled()) return torch::kBFloat16;
  return torch::kFloat;
}

torch::Dtype comm_dtype_of(const ZeroConfig& config, torch::Dtype compute) {
  switch (config.communication_data_type()) {
    case CommDataType::kDefault: return compute;
    case CommDataType::kFp32: return torch::kFloat;
    case CommDataType::kFp16: return torch::kHalf;
    case CommDataType::kBf16: return torch::kBFloat16;
  }
  return compute;
}

}  // namespace

ZeroEngineImpl::ZeroEngineImpl(std::shared_ptr<torch::nn::Module> module, ZeroConfig config, EngineOptions options)
    : module_(std::move(module)), config_(std::move(config)), scaler_(config_.fp16()) {
  COHORT_CHECK_KIND(kInvalidArgument, module_ != nullptr, "cohort::initialize: the model is null");
  comm_ = resolve_comm(options.comm(), "ZeRO engine");
  rank_ = comm_->rank();
  world_ = comm_->size();
  stage_ = config_.zero_optimization().stage();
  COHORT_CHECK_KIND(kInvalidArgument, stage_ >= 0 && stage_ <= 3, "zero_optimization.stage: must be 0, 1, 2 or 3, got ",
                    stage_);
  gas_ = int(config_.gradient_accumulation_steps());
  prefetch_units_ = options.prefetch_units();
  COHORT_CHECK_KIND(kInvalidArgument, prefetch_units_ >= 0, "EngineOptions::prefetch_units: must be >= 0, got ",
                    prefetch_units_);
  COHORT_CHECK_KIND(kInvalidArgument, gas_ >= 1, "gradient_accumulation_steps: must be >= 1, got ", gas_);
  compute_dtype_ = compute_dtype_of(config_);
  comm_dtype_ = comm_dtype_of(config_, compute_dtype_);
  separate_master_ = compute_dtype_ != torch::kFloat;
  module_->to(compute_dtype_);
  {
    // Every rank starts from rank 0's parameters and buffers, as DDP and DeepSpeed do.
    std::vector<torch::Tensor> state;
    for (const auto& p : module_->parameters()) state.push_back(p);
    for (const auto& b : module_->buffers()) state.push_back(b);
    if (world_ > 1) broadcast_coalesced(*comm_, state, 0);
  }
  const auto sharded_shapes = construction_shapes(*module_);
  COHORT_CHECK_KIND(kInvalidArgument, sharded_shapes.empty() || stage_ == 3,
                    "ZeRO engine: the model's units were sharded when they were "
                    "made (cohort::ShardedInit), which needs zero_optimization.stage 3, got stage ",
                    stage_);
  collect_parameters(sharded_shapes);
  if (stage_ == 3) plan_stage3_units(options);
  // Hooks first: autograd takes a parameter's gradient shape from it when the hook's accumulator is
  // made, and build_groups frees stage 3's parameters.
  if (!sharded_shapes.empty()) show_whole_shapes(sharded_shapes);
  register_hooks();
  build_groups();

  std::vector<torch::Tensor> masters;
  for (const auto& group : groups_) masters.push_back(group.master);
  optimizer_ = options.optimizer_factory() ? options.optimizer_factory()(masters)
                                           : make_inner_optimizer(config_.optimizer(), masters);
  COHORT_CHECK_KIND(kInvalidArgument, optimizer_ != nullptr, "EngineOptions::optimizer_factory returned no optimizer");
  for (const auto& master : masters) create_state(*optimizer_, master);
  return_free_memory();  // the parameters' former storage (the whole model at stage 3) is free now
  if (config_.scheduler().type() != SchedulerType::kNone) set_learning_rate(*optimizer_, next_lr());
  COHORT_DEBUG("ZeRO engine: stage ", stage_, ", ", groups_.size(), " group(s), ", params_.size(),
               " trainable parameter(s), compute dtype ", c10::toString(compute_dtype_));
}

ZeroEngineImpl::~ZeroEngineImpl() {
  for (const auto& unit : plan_.units)
    if (unit != nullptr) unit->detach(this);
  for (const auto& route : plan_.routes) route.restore();
}

void ZeroEngineImpl::collect_parameters(const ShapeMap& sharded_shapes) {
  std::unordered_map<const c10::TensorImpl*, std::string> seen;  // a tied parameter is one parameter
  for (const auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen: stays whole, never reduced or updated
    auto [first, fresh] = seen.emplace(item.value().unsafeGetTensorImpl(), item.key());
    if (!fresh) {
      tied_.emplace_back(item.key(), first->second);
      continue;
    }
    names_.push_back(item.key());
    params_.push_back(item.value());
    const auto sharded = sharded_shapes.find(item.value().unsafeGetTensorImpl());
    shapes_.push_back(sharded == sharded_shapes.end() ? item.value().sizes().vec() : sharded->second);
  }
  COHORT_CHECK_KIND(kInvalidArgument, !params_.empty(),
                    "cohort::initialize: the model has no parameter that requires grad");
  for (size_t i = 1; i < params_.size(); ++i)
    COHORT_CHECK_KIND(kInvalidArgument, params_[i].device() == params_[0].device(), "ZeRO engine: parameter '",
                      names_[i], "' is on ", params_[i].device(), " but '", names_[0], "' is on ", params_[0].device(),
                      "; all parameters must be on one device");
}

void ZeroEngineImpl::build_groups() {
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  std::vector<GroupLayout> layouts;
  if (stage_ == 3) {
    layouts = stage3_layouts();
  } else {
    layouts = group_by_size(numels, config_.zero_optimization().reduce_bucket_size(), world_);
  }
  const auto options = params_[0].options().requires_grad(false);
  const auto master_options = options.dtype(torch::kFloat)
                                  .device(config_.zero_optimization().offload_optimizer() == OffloadDevice::kCpu
                                              ? torch::Device(torch::kCPU)
                                              : params_[0].device());
  group_of_.assign(params_.size(), -1);
  grad_aliases_.assign(params_.size(), torch::Tensor());
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < layouts.size(); ++g) {
    FlatGroup group;
    group.layout = std::move(layouts[g]);
    const auto& layout = group.layout;
    for (int64_t index : layout.params) group_of_[size_t(index)] = int64_t(g);
    auto [begin, end] = layout.owned(rank_);
    const bool whole = stage_ == 0;
    if (stage_ == 3) {
      group.flat = stage3_shard(int64_t(g), layout, options);
      group.shard_grad = torch::zeros({layout.shard}, options);
      free_parameters(group);  // now, not after every group: the whole model never exists twice
    } else {
      group.flat = flatten(layout, options);
      for (size_t k = 0; k < layout.params.size(); ++k) {
        auto& param = params_[size_t(layout.params[k])];
        param.set_data(flat_alias(group.flat, layout.offsets[k], param.sizes()));
      }
      if (stage_ == 2) {
        group.shard_grad = torch::zeros({layout.shard}, options);
      } else {
        group.flat_grad = torch::zeros({layout.padded}, options);
        for (size_t k = 0; k < layout.params.size(); ++k) {
          auto& param = params_[size_t(layout.params[k])];
          grad_aliases_[size_t(layout.params[k])] = flat_alias(group.flat_grad, layout.offsets[k], param.sizes());
          param.mutable_grad() = grad_aliases_[size_t(layout.params[k])];
        }
      }
    }
    torch::Tensor owned = whole ? group.flat : (stage_ == 3 ? group.flat : group.flat.narrow(0, begin, end - begin));
    group.master = separate_master_ || owned.device() != master_options.device()
                       ? owned.to(master_options, /*non_blocking=*/false, /*copy=*/true)
                       : owned;
    groups_.push_back(std::move(group));
  }
  ready_.assign(params_.size(), 0);
}

torch::Tensor ZeroEngineImpl::flatten(const GroupLayout& layout, const torch::TensorOptions& options) const {
  torch::Tensor full = torch::zeros({layout.padded}, options);
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const auto& param = params_[size_t(layout.params[k])];
    full.narrow(0, layout.offsets[k], param.numel()).copy_(param.reshape(-1));
  }
  return full;
}

void ZeroEngineImpl::register_hooks() {
  hooks_ = GradHookSet(params_, [this](int64_t index) { on_gradient_ready(index); });
}

void ZeroEngineImpl::on_gradient_ready(int64_t index) {
  auto& param = params_[size_t(index)];
  FlatGroup& group = groups_[size_t(group_of_[size_t(index)])];
  if (stage_ <= 1) {
    // The gradient must stay the alias of flat_grad; an optimizer that set it to None (LibTorch
    // 2.x zero_grad) or replaced it gets it copied back in.
    relink_grad(param, grad_aliases_[size_t(index)]);
  }
  if (!in_backward_) return;  // a backward not started by engine.backward(): nothing to reduce
  COHORT_CHECK_KIND(kInvalidArgument, !ready_[size_t(index)], "ZeRO engine: parameter '", names_[size_t(index)],
                    "' got two gradients in one backward pass");
  ready_[size_t(index)] = 1;
  if (--group.pending > 0) return;
  // Stage 3: the unit's backward is over (every gradient of it accumulated), so its gathered
  // parameters can go even while its reduction waits for its turn; the root's stay to the end.
  const int64_t g = group_of_[size_t(index)];
  if (stage_ == 3 && g != unit_group_[0] && !persistent_[size_t(g)]) release(g);
  launch_ready_reduces();
}

void ZeroEngineImpl::backward(const torch::Tensor& loss) {
  COHORT_CHECK_KIND(kInvalidArgument, loss.defined() && loss.numel() == 1,
                    "engine.backward: the loss must be a single value, got ",
                    loss.defined() ? loss.sizes() : c10::IntArrayRef{});
  // Stage 2/3 reduce every backward; stage 0/1 only at the boundary (until then gradients
  // accumulate in flat_grad). Either way a group is reduced as soon as its gradients are ready.
  if (stage_ >= 2 || at_boundary()) {
    std::fill(ready_.begin(), ready_.end(), 0);
    for (auto& group : groups_) {
      group.pending = int(group.layout.params.size());
      group.launched = false;
    }
    next_launch_ = next_retire_ = in_flight_elements_ = 0;
    in_backward_ = true;
  }
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{in_backward_};
  // DeepSpeed scales by 1/gradient_accumulation_steps so accumulated gradients are a mean, and
  // multiplies in fp32 so the scale itself cannot overflow the loss.
  const double factor = loss_scale() / gas_;
  torch::Tensor scaled = loss.to(torch::kFloat);
  if (factor != 1.0) scaled = scaled * factor;
  scaled.backward();
  if (in_backward_) finish_reduces();
}

void ZeroEngineImpl::launch_ready_reduces() {
  // Last group first, each only after all later ones (the note "launch order").
  const int64_t count = int64_t(groups_.size());
  while (next_launch_ < count && groups_[size_t(count - 1 - next_launch_)].pending == 0) {
    launch_reduce(groups_[size_t(count - 1 - next_launch_)]);
    ++next_launch_;
  }
  retire_reduces(/*all=*/false);
}

// Finishes launched reductions in launch order: those already complete, the oldest even when it
// is not while more than reduce_bucket_size staged elements or kMaxReductionsInFlight reductions are
// in flight (a rank ahead of its peers would otherwise stage every unit's gradients while it waits
// for them), and all of them when `all`. A finished group's staging buffer goes at once, so backward
// holds the gradients of the reductions still in flight, not of every unit. The wait on the oldest
// runs inside a gradient hook: it holds a rank that is ahead until its peers reach that reduction.
void ZeroEngineImpl::retire_reduces(bool all) {
  const int64_t count = int64_t(groups_.size());
  torch::NoGradGuard no_grad;
  while (next_retire_ < next_launch_) {
    FlatGroup& group = groups_[size_t(count - 1 - next_retire_)];
    const bool over_budget = in_flight_elements_ > config_.zero_optimization().reduce_bucket_size() ||
                             (stage_ >= 2 && next_launch_ - next_retire_ > kMaxReductionsInFlight);
    if (!all && !over_budget && !group.reduce_work.is_completed()) return;
    group.reduce_work.wait();
    if (group.comm_input.defined()) {  // stage 0/1 in communication_data_type: back to the compute dtype
      if (stage_ == 0) group.flat_grad.copy_(group.comm_input);
      else group.shard_grad = group.comm_shard.to(group.flat_grad.scalar_type());
      group.comm_input = group.comm_shard = torch::Tensor();
    }
    if (stage_ >= 2 && !group.reduce_output.is_same(group.shard_grad)) group.shard_grad.add_(group.reduce_output);
    if (group.reduce_input.defined()) in_flight_elements_ -= group.layout.padded;
    group.reduce_input = group.reduce_output = torch::Tensor();
    group.reduce_work = Work();
    ++next_retire_;
  }
}

void ZeroEngineImpl::launch_reduce(FlatGroup& group) {
  const auto& layout = group.layout;
  torch::NoGradGuard no_grad;
  group.launched = true;
  if (trace::enabled() && world_ > 1)  // the timeline: this group's gradients are complete; reduction starts
    trace::record_mark(stage_ == 0 ? "allreduce launch" : "reduce-scatter launch", "zero", "launch",
                       int64_t(group.flat_grad.defined() ? group.flat_grad.nbytes() : 0));
  if (stage_ <= 1) {  // the gradients are already flat; stage 0 allreduces, stage 1 reduce-scatters
    if (world_ == 1) {
      if (stage_ == 1) group.shard_grad = group.flat_grad;
      return;
    }
    if (comm_dtype_ != group.flat_grad.scalar_type()) {
      launch_cast_reduce(group);
      return;
    }
    group.flat_grad.mul_(1.0 / world_);
    if (stage_ == 0) {
      group.reduce_work = comm_->allreduce_async(group.flat_grad, ReduceOp::kSum);
    } else {
      group.shard_grad = torch::empty({layout.shard}, group.flat_grad.options());
      group.reduce_work = comm_->reduce_scatter_async(group.shard_grad, group.flat_grad, ReduceOp::kSum);
    }
    if (!config_.zero_optimization().overlap_comm()) group.reduce_work.wait();
    return;
  }
  // Gradients are averaged over ranks by scaling first, as DDP does (the sum then cannot overflow
  // where the mean fits), in the same pass that stages them.
  const auto options = group.shard_grad.options();
  const bool cast = comm_dtype_ != options.dtype() && world_ > 1;  // communication_data_type
  group.reduce_input = buffers_.empty(layout.padded, cast ? options.dtype(comm_dtype_) : options);
  const torch::Tensor scale = torch::scalar_tensor(1.0 / world_, options);
  for (size_t k = 0; k < layout.params.size(); ++k) {
    auto& param = params_[size_t(layout.params[k])];
    auto& grad = param.mutable_grad();
    // The whole size: at stage 3 the parameter itself may already be freed (on_gradient_ready).
    const int64_t numel = c10::multiply_integers(shapes_[size_t(layout.params[k])]);
    torch::Tensor slot = group.reduce_input.narrow(0, layout.offsets[k], numel);
    if (!grad.defined()) {
      slot.zero_();
    } else if (world_ > 1 && !cast) {
      at::mul_out(slot, grad.reshape(-1), scale);
    } else {
      slot.copy_(grad.reshape(-1));
    }
    grad = torch::Tensor();  // only the shard outlives backward (stage 2/3)
  }
  group.reduce_input.narrow(0, layout.numel, layout.padded - layout.numel).zero_();
  if (cast) group.reduce_input.div_(world_);  // DeepSpeed: cast, then divide in that dtype
  // The first reduction since the last step lands in the (zeroed) shard itself; later micro-steps
  // of an accumulation add theirs (and every one does in another communication_data_type).
  group.reduce_output = group.shard_grad_clean && !cast ? group.shard_grad
                                                        : torch::empty({layout.shard}, options.dtype(comm_dtype_));
  group.shard_grad_clean = false;
  group.reduce_work = comm_->reduce_scatter_async(group.reduce_output, group.reduce_input, ReduceOp::kSum);
  in_flight_elements_ += layout.padded;
  if (!config_.zero_optimization().overlap_comm()) group.reduce_work.wait();
}

// Stage 0/1 with communication_data_type: the flat gradients cast, divided by the world size in that
// dtype (before the sum, as DeepSpeed), reduced; retire_reduces casts the result back.
void ZeroEngineImpl::launch_cast_reduce(FlatGroup& group) {
  group.comm_input = group.flat_grad.to(comm_dtype_);
  group.comm_input.div_(world_);
  if (stage_ == 0) {
    group.reduce_work = comm_->allreduce_async(group.comm_input, ReduceOp::kSum);
  } else {
    group.comm_shard = torch::empty({group.layout.shard}, group.comm_input.options());
    group.reduce_work = comm_->reduce_scatter_async(group.comm_shard, group.comm_input, ReduceOp::kSum);
  }
  if (!config_.zero_optimization().overlap_comm()) group.reduce_work.wait();
}

void ZeroEngineImpl::finish_reduces() {
  // Parameters that got no gradient this pass count as zero; launch what is left, in order.
  for (auto& group : groups_) group.pending = 0;
  launch_ready_reduces();
  {
    trace::ScopedSpan span("gradient reduce wait", "zero", "wait");  // the timeline: exposed reduction
    retire_reduces(/*all=*/true);
  }
  if (stage_ == 3) release_all();
}

torch::Tensor ZeroEngineImpl::to_compute(const torch::Tensor& t) const {
  if (!t.defined() || !t.is_floating_point() || t.scalar_type() == compute_dtype_) return t;
  return t.to(compute_dtype_);
}

}  // namespace cohort::detail
