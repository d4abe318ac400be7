// "zero1", "zero2", "zero3" and "deepspeed": the ZeRO engine over the module's network. The config is
// built from the Trainer's options (stage, precision, accumulation, clipping) or read from the
// ds_config, where the Trainer's options override what they set away from their defaults. Without an
// "optimizer" in the config the engine's inner optimizer is the module's configure_optimizers over
// this rank's fp32 shards.
#include <sstream>

#include "cohort/error.h"
#include "cohort/zero.h"
#include "trainer/strategy.h"

namespace cohort::detail {

std::unique_ptr<Strategy> make_ddp_strategy(const ResolvedOptions& options, TrainingModule& module,
                                            const World& world);
std::unique_ptr<Strategy> make_dp_strategy(const ResolvedOptions& options, TrainingModule& module,
                                           const World& world);
std::unique_ptr<Strategy> make_pipeline_strategy(const ResolvedOptions& options, TrainingModule& module,
                                                 const World& world);

namespace {

ZeroConfig zero_config(const ResolvedOptions& options, const World& world) {
  ZeroConfig config;
  if (!options.raw.deepspeed_config().empty()) {
    config = load_ds_config(options.raw.deepspeed_config(), world.size());
    if (options.strategy == StrategyKind::kZero) config.zero_optimization().stage(options.zero_stage);
  } else {
    config.world_size(world.size());
    // DeepSpeed's default: reduce while backward runs at stage 3 only.
    config.zero_optimization(ZeroOptimizationConfig().stage(options.zero_stage).overlap_comm(options.zero_stage >= 3));
  }
  const TrainerOptions& raw = options.raw;
  if (raw.accumulate_grad_batches() != 1) config.gradient_accumulation_steps(raw.accumulate_grad_batches());
  if (raw.gradient_clip_val() > 0) config.gradient_clipping(raw.gradient_clip_val());
  if (options.precision == Precision::kBf16Mixed) config.bf16().enabled(true);
  if (options.precision == Precision::k16Mixed) config.fp16().enabled(true);
  COHORT_CHECK(!config.fp16().enabled() || world.device().is_cuda(), "the ds_config ",
               raw.deepspeed_config(), " enables fp16, but this rank runs on the CPU, where LibTorch has no "
               "float16 convolution: use \"bf16\": {\"enabled\": true} or precision bf16-mixed on the CPU");
  return config;
}

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : ZeroStrategy(zero_config(options, world), module) {}

  torch::Tensor forward(const torch::Tensor& input) override {
    torch::Tensor out = engine_.forward(input);
    return out.scalar_type() == torch::kFloat ? out : out.to(torch::kFloat);
  }
  void backward(const torch::Tensor& loss, bool boundary) override {
    engine_.backward(loss);  // the engine scales by 1 / gradient_accumulation_steps itself
    if (!boundary) engine_.step();  // counts the micro-batch; steps only at its own boundary
  }
  void step() override {
    COHORT_CHECK(engine_.is_gradient_accumulation_boundary(), "the ZeRO engine's accumulation boundary "
                 "(every ", engine_.config().gradient_accumulation_steps(), " micro-batches) and the Trainer's disagree");
    engine_.step();
  }
  torch::optim::Optimizer& optimizer() override { return engine_.optimizer(); }
  int64_t accumulation() const override { return engine_.config().gradient_accumulation_steps(); }
  double lr() const override { return engine_.lr(); }
  void add_to(CheckpointState& state) override { state.add("engine", engine_); }
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    auto parameters = engine_.full_parameters();
    for (auto& item : parameters) item.second = item.second.to(torch::kCPU).contiguous();
    return parameters;
  }
  std::string describe() const override {
    std::ostringstream out;
    out << "ZeRO stage " << engine_.stage() << " (" << c10::toString(engine_.compute_dtype()) << ")";
    return out.str();
  }

 private:
  ZeroStrategy(const ZeroConfig& config, TrainingModule& module)
      : engine_(initialize(config, module.network(), engine_options(module, config))) {}

  // A ds_config's "optimizer" wins; otherwise the module's configure_optimizers over the shards.
  static EngineOptions engine_options(TrainingModule& module, const ZeroConfig& config) {
    if (config.optimizer().type() != OptimizerType::kNone) return {};
    TrainingModule* owner = &module;
    return EngineOptions().optimizer_factory([owner](std::vector<torch::Tensor> shards) {
      auto optimizer = owner->configure_optimizers(std::move(shards));
      COHORT_CHECK(optimizer != nullptr, "configure_optimizers returned no optimizer");
      return optimizer;
    });
  }
  ZeroEngine<torch::nn::SequentialImpl> engine_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world) {
  if (options.strategy == StrategyKind::kZero || options.strategy == StrategyKind::kDeepSpeed)
    return std::make_unique<ZeroStrategy>(options, module, world);
  if (options.strategy == StrategyKind::kDp) return make_dp_strategy(options, module, world);
  if (options.strategy == StrategyKind::kPipeline) return make_pipeline_strategy(options, module, world);
  return make_ddp_strategy(options, module, world);
}

}  // namespace cohort::detail
