// cohort::initialize: DeepSpeed's engine for C++. ZeRO stage 1 shards the optimizer state (and the
// fp32 master weights) across ranks, stage 2 the gradients too, stage 3 the parameters too; bf16/fp16
// compute with fp32 master weights and, for fp16, dynamic loss scaling. The loop reads like
// DeepSpeed's: `auto out = engine.forward(x); engine.backward(loss); engine.step();`. See docs/zero.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"
#include "cohort/fsdp.h"
#include "cohort/stateful.h"
#include "cohort/zero_config.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// Called with each full parameter's name and float32 value (for_each_full_parameter).
using ParameterVisitor = std::function<void(const std::string& name, const torch::Tensor& value)>;

/// Fills `out` (1-D, on the CPU, in the dtype to load into) with elements [begin, begin + out.numel())
/// of the tensor `name` of full shape `shape`, flattened row-major, and returns true; or returns false
/// to leave that tensor as it is (load_full_parameters).
using ParameterReader =
    std::function<bool(const std::string& name, const std::vector<int64_t>& shape, int64_t begin, torch::Tensor out)>;

/// One trainable parameter's state in a ZeRO engine: elements [begin, end) of the flattened
/// parameter (of shape `shape`), by field: "master" (fp32) first, then the optimizer's ("exp_avg", ...).
struct ParameterState {
  std::string name;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<std::pair<std::string, torch::Tensor>> fields;  ///< 1-D, end - begin elements each
};
using ParameterStateVisitor = std::function<void(const ParameterState& state)>;

/// Bytes this rank holds right now, by the ZeRO paper's parts.
struct MemoryReport {
  int64_t num_parameters = 0;   ///< Ψ: trainable elements of the whole model
  int64_t parameter_bytes = 0;  ///< trainable parameters in compute precision (stage 3: this rank's shards)
  int64_t gradient_bytes = 0;   ///< gradients kept between steps (full, or this rank's shard at stage 2/3)
  int64_t optimizer_bytes = 0;  ///< fp32 master weights when separate from the parameters + optimizer states
  int64_t buffer_bytes = 0;     ///< communication buffers and stage 3 parameters gathered at this moment
  /// Idle buffers the engine keeps for its next gathers and reductions (on the CPU; not in total(),
  /// as CUDA's reserved memory is not in its allocated memory).
  int64_t cached_bytes = 0;
  /// State kept in swap files on disk (offload to nvme): not memory, not in total().
  int64_t file_bytes = 0;
  /// Bytes read from and written to the swap files since the engine started (the I/O offload costs:
  /// the difference over a step is that step's traffic).
  int64_t file_io_bytes = 0;
  int64_t total() const { return parameter_bytes + gradient_bytes + optimizer_bytes + buffer_bytes; }
};

struct EngineOptions {
  /// The Comm to shard over; null means the world's (cohort::init()).
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
  /// HSDP (FSDP2's 2-D mesh, DeepSpeed's hpZ for gradients): the ranks that hold the same shard as this
  /// one in the other shard groups, one per group (a host's ranks shard, the hosts replicate). Gradients
  /// are reduce-scattered within `comm`, then the shard is allreduced across these replicas; parameters
  /// are gathered within `comm` only. Null: `comm` is every data-parallel rank.
  TORCH_ARG(std::shared_ptr<Comm>, replicate_comm) = nullptr;
  /// Builds the inner optimizer over the engine's fp32 shards when the config has no "optimizer"
  /// (DeepSpeed's client optimizer). Takes the shard tensors, returns e.g. a torch::optim::SGD.
  using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;
  TORCH_ARG(OptimizerFactory, optimizer_factory) = nullptr;
  /// Stage 3: which modules become sharding units besides those the model marked with
  /// cohort::fully_shard (Lightning's auto_wrap_policy; only modules a torch::nn::Sequential calls can
  /// be reached: see cohort/fsdp.h). Null: a Sequential model without marked units shards each of its
  /// entries; any other model shards what it marked.
  TORCH_ARG(UnitPolicy, unit_policy) = nullptr;
  /// The options of the units unit_policy makes.
  TORCH_ARG(UnitOptions, unit_options) = {};
  /// Stage 3: at most this many units gathered ahead of the one running (FSDP2 gathers the next one:
  /// 1). 0: only stage3_prefetch_bucket_size and stage3_max_live_parameters bound it (DeepSpeed).
  TORCH_ARG(int64_t, prefetch_units) = 0;
  /// The ranks that hold the other parts of each layer cut by tensor parallelism (DeepSpeed's mpu;
  /// the Trainer's "tensor_parallel" group): gradient clipping's norm covers the whole model, summed
  /// over this group too. Null: this engine's parameters are the whole model.
  TORCH_ARG(std::shared_ptr<Comm>, model_parallel_comm) = nullptr;
  /// The parameters every rank of model_parallel_comm holds whole and alike (a row-wise layer's bias,
  /// a LayerNorm's weight): counted once in that norm.
  TORCH_ARG(std::vector<torch::Tensor>, model_parallel_replicated) = {};
};

namespace detail {
class ZeroEngineImpl;
}

/// The non-template part of the engine; use the ZeroEngine<M> that cohort::initialize returns.
class ZeroEngineCore : public Stateful {
 public:
  ZeroEngineCore(std::shared_ptr<torch::nn::Module> module, ZeroConfig config, EngineOptions options);
  ~ZeroEngineCore() override;
  ZeroEngineCore(ZeroEngineCore&&) noexcept;
  ZeroEngineCore& operator=(ZeroEngineCore&&) noexcept;

  /// Runs backward on loss * loss_scale / gradient_accumulation_steps and reduces the gradients
  /// (stage 2/3 while backward runs; stage 0/1 at the accumulation boundary).
  void backward(const torch::Tensor& loss);
  /// Call after every backward. At the gradient accumulation boundary: unscales, checks for fp16
  /// overflow on all ranks (skipping the step and lowering the scale when one has it), clips, steps
  /// the inner optimizer on this rank's shard, advances the LR schedule and gathers the updated
  /// parameters. Between boundaries it does nothing.
  void step();
  /// Between the last backward of a step and step(): sums parameter `name`'s reduced gradient with
  /// that of its twins in other engines over `comm` (a weight tied across pipeline stages, each stage
  /// its own engine, as Megatron sums the embedding and head). Every engine in `comm` calls it; the
  /// parameter must be alone in its flat group (at stage 3 a unit of its own) in each, laid out alike.
  void sum_tied_gradient(const std::string& name, Comm& comm);

  /// True when the next step() is an optimizer step.
  bool is_gradient_accumulation_boundary() const;
  /// Optimizer steps taken or skipped so far (DeepSpeed's global_steps).
  int64_t global_steps() const;
  /// Steps skipped because of an fp16 overflow.
  int64_t skipped_steps() const;
  /// Whether the last boundary step() was skipped (overflow).
  bool last_step_skipped() const;
  /// The current loss scale (1 without fp16).
  double loss_scale() const;
  /// The learning rate the next optimizer step uses.
  double lr() const;
  /// The global gradient norm of the last boundary step, before clipping (after unscaling); computed
  /// only when gradient_clipping is set (it costs a pass over the gradients and an allreduce), else 0.
  double last_gradient_norm() const;
  /// The dtype forward runs in: float32, bfloat16 or float16.
  torch::Dtype compute_dtype() const;
  int stage() const;
  const ZeroConfig& config() const;
  MemoryReport memory_report() const;
  /// The inner optimizer (it sees only this rank's fp32 shards).
  torch::optim::Optimizer& optimizer();

  /// `t` in the compute dtype when it is a floating-point tensor of another dtype (what forward()
  /// does to its arguments), else `t` itself.
  torch::Tensor to_compute(const torch::Tensor& t) const;

  /// The full parameters by name, in float32 (gathers shards at stage 3; all ranks must call it).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters();
  /// The same one parameter at a time, in the module's order, on the CPU: a unit's shards are
  /// gathered when its first parameter comes and dropped after its last, so no rank holds the whole
  /// model (a digest, a consolidated file). `visit`'s tensor lives until it returns: clone to keep it.
  void for_each_full_parameter(const ParameterVisitor& visit);
  /// The reverse, for pretrained weights: `read` is asked for every trainable parameter, only for the
  /// elements this rank keeps (its shard; an empty `out` when it keeps none), and for each frozen
  /// parameter and buffer whole; the compute-precision parameters are then made from them (at stage
  /// 1-2 an all-gather). The optimizer state and counters are left as they are. All ranks call it; a
  /// read that fails on one rank fails it on all of them (cohort::load_pretrained reads safetensors).
  void load_full_parameters(const ParameterReader& read);
  /// This rank's shard of every trainable parameter's state (elements it keeps; none: begin == end), as
  /// views of the live tensors: a load writes into them, then calls load_state_values(). Optimizer
  /// state on NVMe is refused (its tensors are out of memory). A checkpoint by parameter name, which
  /// loads whatever the groups, units or shard count (the Trainer saves ZeRO state this way).
  std::vector<ParameterState> parameter_states();
  /// Every trainable parameter's whole state, in the module's order: a group's shards are gathered
  /// over the shard group at its first parameter and dropped after its last (all ranks call it).
  void for_each_whole_parameter_state(const ParameterStateVisitor& visit);
  /// This rank's place in the group it shards over (rank, ranks): 0 and 1 when nothing is sharded.
  std::pair<int, int> shard_position() const;

  // Stateful (cohort/checkpoint.h): shards of master weights and optimizer state, buffers, counters.
  void prepare_load() override;
  std::vector<StateTensor> state_tensors() override;
  /// The state by parameter name instead, as the Trainer saves it: each trainable parameter's master
  /// weights and optimizer state whole-shaped ("<name>.master", ".exp_avg", ...), buffers as
  /// "module.<name>", the counters. It loads whatever the world size, units or groups, and is what
  /// cohort-ckpt import --format dcp writes from PyTorch's checkpoints. The engine must outlive it;
  /// optimizer state in memory (not on NVMe).
  std::shared_ptr<Stateful> parameter_state();
  /// Optimizer state on NVMe: part g is flat group g's master and optimizer state, read from the swap
  /// file when lent (the next groups read ahead) and written back when a load changed it.
  std::vector<StateTensor> lend_part(int64_t part) override;
  void give_back_part(int64_t part, bool changed) override;
  StateValues state_values() const override;
  void load_state_values(const StateValues& values) override;

 protected:
  /// One forward of the whole model: at stage 3 the root unit's parameters are gathered first, the
  /// order the units run in is recorded (prefetching follows it), and under no_grad everything is
  /// freed at the end.
  class ForwardScope {
   public:
    explicit ForwardScope(ZeroEngineCore& engine);
    ~ForwardScope();
    ForwardScope(const ForwardScope&) = delete;
    ForwardScope& operator=(const ForwardScope&) = delete;

   private:
    detail::ZeroEngineImpl& impl_;
  };

  std::unique_ptr<detail::ZeroEngineImpl> impl_;
};

/// The engine for a module of type M. forward() casts floating-point tensor arguments to the compute
/// dtype and calls the module; at stage 3 each sharding unit inside it (cohort/fsdp.h) gathers its
/// parameters just in time.
template <typename M>
class ZeroEngine : public ZeroEngineCore {
 public:
  ZeroEngine(std::shared_ptr<M> module, ZeroConfig config, EngineOptions options)
      : ZeroEngineCore(module, std::move(config), std::move(options)), module_(std::move(module)) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    ForwardScope scope(*this);
    return module_->forward(cast(std::forward<Args>(args))...);
  }
  /// Runs fn() as one forward of the model (for code that calls the model itself, e.g. a Trainer
  /// step computing the loss): what forward() does, without casting arguments.
  template <typename F>
  auto run_forward(F&& fn) {
    ForwardScope scope(*this);
    return fn();
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  M* operator->() const { return module_.get(); }
  const std::shared_ptr<M>& module() const { return module_; }

 private:
  template <typename T>
  decltype(auto) cast(T&& value) const {
    if constexpr (std::is_same_v<std::decay_t<T>, torch::Tensor>) {
      return to_compute(value);
    } else {
      return std::forward<T>(value);
    }
  }
  std::shared_ptr<M> module_;
};

struct ShardedInitOptions {
  /// The Comm the units are sharded over (the engine's later); null means the world's.
  TORCH_ARG(std::shared_ptr<Comm>, comm) = nullptr;
  /// HSDP: the engine's EngineOptions::replicate_comm; each unit's parameters then come from rank 0 of
  /// the first replica's shard group, the same on every replica.
  TORCH_ARG(std::shared_ptr<Comm>, replicate_comm) = nullptr;
};

/// DeepSpeed's `with deepspeed.zero.Init():` for C++. While it lives, each unit the code marks with
/// cohort::fully_shard is sharded as it is made: its parameters are broadcast from rank 0, this
/// rank keeps its 1/N slice, and the parameters are emptied, so the whole model never exists on a
/// rank (construction needs the root, the shards and one unit, not the whole model). Such units run
/// only inside a ZeRO stage 3 engine (cohort::initialize), which adopts the shards. See docs/fsdp.md.
///
///   std::shared_ptr<GPTImpl> model;
///   { cohort::ShardedInit sharded; model = std::make_shared<GPTImpl>(options); }
///   auto engine = cohort::initialize(config, model);  // stage 3
class ShardedInit {
 public:
  explicit ShardedInit(ShardedInitOptions options = {});
  ~ShardedInit();
  ShardedInit(const ShardedInit&) = delete;
  ShardedInit& operator=(const ShardedInit&) = delete;

 private:
  class Sharder;
  std::unique_ptr<Sharder> sharder_;
};

/// DeepSpeed's deepspeed.initialize for C++: shards `model` (on every rank of the world, or
/// options.comm) as the config says and returns the engine. Parameters are broadcast from rank 0.
template <typename M>
ZeroEngine<M> initialize(ZeroConfig config, std::shared_ptr<M> model, EngineOptions options = {}) {
  return ZeroEngine<M>(std::move(model), std::move(config), std::move(options));
}
template <typename Impl>
ZeroEngine<Impl> initialize(ZeroConfig config, const torch::nn::ModuleHolder<Impl>& model, EngineOptions options = {}) {
  return ZeroEngine<Impl>(model.ptr(), std::move(config), std::move(options));
}

}  // namespace cohort
COHORT_EXPORT_END
