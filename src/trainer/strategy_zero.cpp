// "zero1", "zero2", "zero3"/"fsdp" and "deepspeed": the ZeRO engine over the module's model (its
// network, or the module itself when it has its own layers). The config is built from the Trainer's
// options (stage, precision, accumulation, clipping) or read from the ds_config, where the Trainer's
// options override what they set away from their defaults. Without an "optimizer" in the config the
// engine's inner optimizer is the module's configure_optimizers over this rank's fp32 shards. At
// stage 3 the units are those the module marked plus those its shard_units() policy makes. A module
// with its own layers calls its model in its steps: each step runs as one forward of the model. At
// stage 3 the module's configure_model() runs inside a ShardedInit. With tensor_parallel_size > 1 the
// engine runs over the mesh's data_parallel axis (each tensor-parallel rank's engine shards its own
// parts of the cut layers over its data-parallel group, as FSDP2 over a TP mesh dimension does), the
// data is split over that axis. The engine's state is saved by parameter (zero/parameter_state.h).
#include <sstream>

#include "cohort/error.h"
#include "cohort/zero.h"
#include "core/check.h"
#include "core/text.h"
#include "tp/parameter_cuts.h"
#include "trainer/strategy.h"
#include "trainer/tensor_parallel_rank_state.h"
#include "trainer/whole_tensor_state.h"

namespace cohort::detail {

std::unique_ptr<Strategy> make_ddp_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world,
                                            const std::shared_ptr<Mesh>& mesh);
std::unique_ptr<Strategy> make_dp_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world);
std::unique_ptr<Strategy> make_pipeline_strategy(const ResolvedOptions& options, TrainingModule& module,
                                                 const World& world);

namespace {

// The engine's world: the data-parallel ranks (all of them without tensor parallelism), over which a
// ds_config's batch sizes are read.
ZeroConfig zero_config(const ResolvedOptions& options, const World& world) {
  ZeroConfig config;
  const int data_parallel = world.size() / static_cast<int>(options.raw.tensor_parallel_size());
  if (!options.raw.deepspeed_config().empty()) {
    config = load_ds_config(options.raw.deepspeed_config(), data_parallel);
    if (options.strategy == StrategyKind::kZero) config.zero_optimization().stage(options.zero_stage);
  } else {
    config.world_size(data_parallel);
    // DeepSpeed's default: reduce while backward runs at stage 3 only.
    config.zero_optimization(ZeroOptimizationConfig().stage(options.zero_stage).overlap_comm(options.zero_stage >= 3));
  }
  const TrainerOptions& raw = options.raw;
  if (raw.accumulate_grad_batches() != 1) config.gradient_accumulation_steps(raw.accumulate_grad_batches());
  if (raw.gradient_clip_val() > 0) config.gradient_clipping(raw.gradient_clip_val());
  if (raw.offload_optimizer()) {
    const bool nvme = raw.offload_optimizer_device() == "nvme";
    config.zero_optimization().offload_optimizer(OffloadOptimizerConfig()
                                                     .device(nvme ? OffloadDevice::kNvme : OffloadDevice::kCpu)
                                                     .nvme_path(raw.nvme_path())
                                                     .buffer_count(int(raw.optimizer_buffer_count())));
  }
  if (raw.offload_parameters()) {
    COHORT_CHECK_KIND(kInvalidArgument, config.zero_optimization().stage() == 3,
                      "TrainerOptions.offload_parameters is for ZeRO stage 3, but the ds_config ",
                      raw.deepspeed_config(), " sets zero_optimization.stage ", config.zero_optimization().stage());
    const bool nvme = raw.offload_params_device() == "nvme";
    config.zero_optimization().offload_param(OffloadParamConfig()
                                                 .device(nvme ? OffloadDevice::kNvme : OffloadDevice::kCpu)
                                                 .nvme_path(raw.nvme_path())
                                                 .buffer_count(int(raw.params_buffer_count()))
                                                 .buffer_size(raw.params_buffer_size())
                                                 .max_in_cpu(raw.max_in_cpu()));
  }
  if (options.precision == Precision::kBf16Mixed) config.bf16().enabled(true);
  if (options.precision == Precision::k16Mixed) config.fp16().enabled(true);
  COHORT_CHECK_KIND(kInvalidArgument, !config.fp16().enabled() || world.device().is_cuda(), "the ds_config ",
                    raw.deepspeed_config(),
                    " enables fp16, but this rank runs on the CPU, where LibTorch has no "
                    "float16 convolution: use \"bf16\": {\"enabled\": true} or precision bf16-mixed on the CPU");
  return config;
}

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(const ResolvedOptions& options, TrainingModule& module, std::shared_ptr<Mesh> mesh,
               std::shared_ptr<Mesh> replicas)
      : ZeroStrategy(*options.zero, options, module, std::move(mesh), std::move(replicas)) {}

  std::pair<int, int> data_split(const World& world) const override {
    if (!mesh_) return Strategy::data_split(world);
    return {mesh_->size("data_parallel"), mesh_->coordinate("data_parallel")};
  }
  int shard_ranks(const World& world) const override {
    return replicas_ ? replicas_->size("shard") : data_split(world).first;
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    auto& network = *module_.network();
    torch::Tensor out = engine_.run_forward([&] { return network.forward(to_compute(input)); });
    return out.scalar_type() == torch::kFloat ? out : out.to(torch::kFloat);
  }
  torch::Tensor run_forward(const std::function<torch::Tensor()>& fn) override { return engine_.run_forward(fn); }
  // A module with its own layers: its step is the forward (the network path's steps call forward()).
  torch::Tensor training_step(TrainingModule& module, Batch& batch, int64_t index) override {
    if (module.has_network()) return module.training_step(batch, index);
    Batch cast{to_compute(batch.data), batch.target};
    return engine_.run_forward([&] { return module.training_step(cast, index); });
  }
  void evaluation_step(TrainingModule& module, Batch& batch, int64_t index, Stage stage) override {
    if (module.has_network()) return Strategy::evaluation_step(module, batch, index, stage);
    Batch cast{to_compute(batch.data), batch.target};
    engine_.run_forward([&] { Strategy::evaluation_step(module, cast, index, stage); });
  }
  void backward(const torch::Tensor& loss, bool boundary) override {
    engine_.backward(loss);         // the engine scales by 1 / gradient_accumulation_steps itself
    if (!boundary) engine_.step();  // counts the micro-batch; steps only at its own boundary
  }
  void step() override {
    COHORT_CHECK_KIND(kInternal, engine_.is_gradient_accumulation_boundary(),
                      "the ZeRO engine's accumulation boundary "
                      "(every ",
                      engine_.config().gradient_accumulation_steps(), " micro-batches) and the Trainer's disagree");
    engine_.step();
  }
  torch::optim::Optimizer& optimizer() override { return engine_.optimizer(); }
  int64_t accumulation() const override { return engine_.config().gradient_accumulation_steps(); }
  double lr() const override { return engine_.lr(); }
  // By parameter, so that any mesh resumes it; optimizer state on NVMe is lent a flat group at a time
  // and keeps the engine's own form (per tensor-parallel rank under tensor parallelism).
  void add_to(CheckpointState& state) override {
    if (engine_.config().zero_optimization().offload_optimizer().device() != OffloadDevice::kNvme) {
      ParameterStateOptions by_parameter;
      by_parameter.part_of = tensor_parallel_part_of(cut_of_);
      state.add("engine", engine_parameter_state(engine_, std::move(by_parameter)));
    } else if (!mesh_) {
      state.add("engine", engine_);
    } else {
      state.add("engine", tensor_parallel_rank_state(engine_, mesh_->coordinate("tensor_parallel")));
    }
  }
  // Each rank reads its own shards' bytes (of a tensor-parallel cut, its part's runs).
  void load_pretrained(const std::string& path, const StateDictOptions& options) override {
    load_pretrained_parts(engine_, path, options, tensor_parallel_parts(cut_of_));
  }
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    auto parameters = engine_.full_parameters();
    for (auto& [name, value] : parameters) value = whole(name, value).to(torch::kCPU).contiguous();
    return parameters;
  }
  void for_each_full_parameter(const ParameterVisitor& visit) override {
    if (!mesh_) return engine_.for_each_full_parameter(visit);
    engine_.for_each_full_parameter([&](const std::string& name, const torch::Tensor& value) {
      visit(name, whole(name, value));  // every rank gathers over its tp group: the same order on each
    });
  }
  MemoryReport memory_report() const override { return engine_.memory_report(); }
  int zero_stage() const override { return engine_.stage(); }
  OffloadDevice offload_optimizer() const override {
    return engine_.config().zero_optimization().offload_optimizer().device();
  }
  OffloadDevice offload_params() const override {
    return engine_.config().zero_optimization().offload_param().device();
  }
  c10::ScalarType compute_dtype() const override { return engine_.compute_dtype(); }
  std::string describe() const override {
    std::ostringstream out;
    out << "ZeRO stage " << engine_.stage() << " (" << c10::toString(engine_.compute_dtype()) << ")";
    if (mesh_)
      out << " over " << mesh_->size("data_parallel") << " data parallel x " << mesh_->size("tensor_parallel")
          << " tensor parallel";
    if (replicas_)
      out << ", HSDP: " << replicas_->size("replicate") << " replicas x " << replicas_->size("shard") << " shards";
    return out.str();
  }

 private:
  ZeroStrategy(const ZeroConfig& config, const ResolvedOptions& options, TrainingModule& module,
               std::shared_ptr<Mesh> mesh, std::shared_ptr<Mesh> replicas)
      : module_(module),
        mesh_(std::move(mesh)),
        replicas_(std::move(replicas)),
        cut_of_(mesh_ ? module_cuts(module.model()) : nullptr),
        engine_(initialize(config, model_pointer(module),
                           engine_options(options, module, config, mesh_, replicas_, cut_of_))) {}

  // A parameter cut by tensor parallelism, gathered whole over the tp group (a collective).
  torch::Tensor whole(const std::string& name, const torch::Tensor& value) const {
    const auto* cut = cut_of_ ? cut_of_(name) : nullptr;
    return cut ? tp::detail::gather_cut(value, *cut) : value;
  }

  // The Sequential path casts in ZeroEngine::forward; a step of a module with its own layers casts
  // the batch's data the same way.
  torch::Tensor to_compute(const torch::Tensor& t) const { return engine_.to_compute(t); }

  // A ds_config's "optimizer" wins; otherwise the module's configure_optimizers over the shards. At
  // stage 3 the module's shard_units() names units besides those it marked.
  // Under tensor parallelism the engine shards over the data-parallel group, and clipping's norm sums
  // over the tensor-parallel group too, the parameters no plan cut counted once. Under HSDP it shards
  // over its replica's part of the data-parallel ranks.
  static EngineOptions engine_options(
      const ResolvedOptions& options, TrainingModule& module, const ZeroConfig& config,
      const std::shared_ptr<Mesh>& mesh, const std::shared_ptr<Mesh>& replicas,
      const std::function<const tp::detail::ParameterCut*(const std::string&)>& cut_of) {
    EngineOptions out;
    if (mesh) {
      std::vector<torch::Tensor> whole;
      for (const auto& item : module.model().named_parameters(true))
        if (cut_of(item.key()) == nullptr) whole.push_back(item.value());
      out.comm(mesh->group_ptr("data_parallel"))
          .model_parallel_comm(mesh->group_ptr("tensor_parallel"))
          .model_parallel_replicated(std::move(whole));
    }
    if (replicas) out.comm(replicas->group_ptr("shard")).replicate_comm(replicas->group_ptr("replicate"));
    if (config.zero_optimization().stage() == 3)
      out.unit_policy(module.shard_units())
          .unit_options(UnitOptions()
                            .reshard_after_forward(options.raw.reshard_after_forward())
                            .activation_checkpointing(options.raw.activation_checkpointing()))
          .prefetch_units(options.fsdp ? 1 : 0);  // fsdp gathers one unit ahead, as FSDP2 does
    if (config.optimizer().type() != OptimizerType::kNone) return out;
    TrainingModule* owner = &module;
    return out.optimizer_factory([owner](std::vector<torch::Tensor> shards) {
      auto optimizer = owner->configure_optimizers(std::move(shards));
      COHORT_CHECK_KIND(kInvalidArgument, optimizer != nullptr, "configure_optimizers returned no optimizer");
      return optimizer;
    });
  }
  TrainingModule& module_;
  std::shared_ptr<Mesh> mesh_;      // tensor parallel: (data_parallel, tensor_parallel)
  std::shared_ptr<Mesh> replicas_;  // HSDP: (replicate, shard) over the data-parallel ranks
  // Tensor parallel: the cuts by name, found before the engine takes the parameters.
  std::function<const tp::detail::ParameterCut*(const std::string&)> cut_of_;
  ZeroEngine<torch::nn::Module> engine_;
};

}  // namespace

// Lightning runs configure_model inside the strategy's init context (DeepSpeed's zero.Init, FSDP's
// meta device); at stage 3 that is a ShardedInit, so the units it makes are sharded as they are made.
void resolve_zero_config(ResolvedOptions& options, const World& world) {
  if (options.strategy == StrategyKind::kZero || options.strategy == StrategyKind::kDeepSpeed)
    options.zero = std::make_shared<const ZeroConfig>(zero_config(options, world));
}

// Under tensor parallelism configure_model cuts the layers first; the engine shards the cut parts after.
// Under HSDP a unit is sharded over its replica's ranks and made the same on every replica.
void configure_model(const ResolvedOptions& options, TrainingModule& module, const World& world,
                     const std::shared_ptr<Mesh>& replicas) {
  if (!options.zero || options.zero->zero_optimization().stage() != 3 || options.raw.tensor_parallel_size() > 1)
    return module.configure_model();
  ShardedInit sharded(
      replicas
          ? ShardedInitOptions().comm(replicas->group_ptr("shard")).replicate_comm(replicas->group_ptr("replicate"))
          : ShardedInitOptions().comm(world.comm_ptr()));
  module.configure_model();
}

std::unique_ptr<Strategy> make_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world,
                                        const std::shared_ptr<Mesh>& mesh, const std::shared_ptr<Mesh>& replicas) {
  if (options.strategy == StrategyKind::kZero || options.strategy == StrategyKind::kDeepSpeed)
    return std::make_unique<ZeroStrategy>(options, module, mesh, replicas);
  if (options.strategy == StrategyKind::kDp) return make_dp_strategy(options, module, world);
  if (options.strategy == StrategyKind::kPipeline) return make_pipeline_strategy(options, module, world);
  return make_ddp_strategy(options, module, world, mesh);
}

}  // namespace cohort::detail
