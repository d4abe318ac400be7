// The data-parallel side of a pipeline's stages. With DDP, the backwards before a stage's last
// microbatch run under no_sync. With ZeRO, gradients accumulate between microbatches in the engine's
// flat gradient buffer (its hooks only keep the aliases); the backward of a stage's last microbatch
// goes through the engine, which reduce-scatters as gradients become ready, and optimizer_step()
// steps each engine on its shard.
#include "pipeline/stage_replicas.h"

#include <torch/torch.h>

#include <optional>

#include "core/check.h"
#include "core/units.h"
#include "pipeline/pipeline_impl.h"

namespace cohort::pipeline::detail {
namespace {

// Stage 3's units: the units the layers mark (a GPT's blocks) and each of the stage's entries holding
// none (without marked units that is every entry, the engine's default): a weight tied across stages
// is then a unit's own flat group in each stage, laid out alike (TiedParameters).
UnitPolicy entries_without_units() {
  return [](const std::string& name, const torch::nn::Module& module) {
    if (name.find('.') != std::string::npos || module.parameters().empty()) return false;
    for (const auto& item : module.named_modules())
      if (cohort::detail::find_unit(*item.value()) != nullptr) return false;
    return true;
  };
}

}  // namespace

torch::Tensor in_float(const torch::Tensor& t) {
  const bool reduced = t.defined() && (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf);
  return reduced ? t.to(torch::kFloat) : t;
}

StageReplicas::StageReplicas(const std::vector<torch::nn::Sequential>& stages, const PipelineOptions& options,
                             std::vector<int> last_backward)
    : last_backward_(std::move(last_backward)) {
  if (options.zero()) {
    make_zero_engines(stages, options);
  } else if (options.data_comm()) {
    auto ddp_options = options.ddp();
    ddp_options.comm(options.data_comm());
    for (const auto& stage : stages) ddp_.push_back(std::make_unique<DataParallelCore>(stage.ptr(), ddp_options));
  }
}

void StageReplicas::make_zero_engines(const std::vector<torch::nn::Sequential>& stages,
                                      const PipelineOptions& options) {
  const ZeroConfig& config = *options.zero();
  COHORT_CHECK_KIND(kInvalidArgument, options.data_comm(),
                    "Pipeline: PipelineOptions::zero needs PipelineOptions::data_comm (the "
                    "replicas of a stage to shard over, e.g. Mesh::group_ptr(\"data\"))");
  const int stage = config.zero_optimization().stage();
  COHORT_CHECK_KIND(kInvalidArgument, stage >= 1 && stage <= 3,
                    "Pipeline: PipelineOptions::zero has zero_optimization.stage ", stage,
                    "; a pipeline runs ZeRO stage 1, 2 or 3 over its data group (stage 0 is DDP: use "
                    "PipelineOptions::ddp)");
  COHORT_CHECK_KIND(kInvalidArgument, stage != 3 || !options.recompute(),
                    "Pipeline: PipelineOptions::recompute with ZeRO stage 3: the engine recomputes a unit's forward "
                    "itself (activation_checkpointing of its units); use that instead");
  COHORT_CHECK_KIND(kInvalidArgument, !config.fp16().enabled(),
                    "Pipeline: PipelineOptions::zero has fp16 enabled; its loss scale would have to skip a step on "
                    "every stage when one overflows, which is not built: use bf16 (no loss scale) or fp32");
  COHORT_CHECK_KIND(kInvalidArgument, config.gradient_accumulation_steps() == 1,
                    "Pipeline: PipelineOptions::zero has "
                    "gradient_accumulation_steps ",
                    config.gradient_accumulation_steps(),
                    "; the pipeline's microbatches are its accumulation (PipelineOptions::chunks): use 1");
  COHORT_CHECK_KIND(kInvalidArgument, config.gradient_clipping() == 0.0,
                    "Pipeline: PipelineOptions::zero has gradient_clipping ", config.gradient_clipping(),
                    "; each engine sees one stage's gradients only, not the whole "
                    "model's norm: use 0");
  auto engine_options = EngineOptions().comm(options.data_comm()).optimizer_factory(options.zero_optimizer());
  // Stage 3 reduce-scatters every microbatch's gradients into the shard's: the engine accumulates over
  // the step's microbatches (it scales each backward by 1 / chunks; backward() undoes that).
  sharded_parameters_ = stage == 3;
  ZeroConfig engine_config = config;
  if (sharded_parameters_) {
    engine_config.gradient_accumulation_steps(options.chunks());
    engine_options.unit_policy(entries_without_units());
  }
  for (const auto& module : stages)
    zero_.push_back(
        std::make_unique<ZeroEngine<torch::nn::SequentialImpl>>(module.ptr(), engine_config, engine_options));
}

void StageReplicas::backward(int local, int microbatch, const torch::Tensor& root, const torch::Tensor& grad) {
  const bool last = microbatch == last_backward_.at(local);
  if (sharded_parameters_) {
    auto& engine = *zero_[local];
    const double chunks = engine.config().gradient_accumulation_steps();
    zero_[local]->backward((grad.defined() ? (root * grad).sum() : root) * chunks);
    if (!last) engine.step();  // counts the microbatch; Pipeline::optimizer_step steps at the last
    return;
  }
  if (!zero_.empty() && last) {
    // The engine runs backward from a scalar: sum(output * grad) gives the stage's graph the same
    // gradient as backward(output, grad).
    zero_[local]->backward(grad.defined() ? (root * grad).sum() : root);
    return;
  }
  std::optional<DataParallelCore::NoSyncGuard> no_sync;
  if (!ddp_.empty() && !last) no_sync.emplace(ddp_[local]->no_sync());
  if (grad.defined()) torch::autograd::backward({root}, {grad});
  else torch::autograd::backward({root});
}

torch::Tensor StageReplicas::forward(int local, const std::function<torch::Tensor()>& fn) {
  if (!sharded_parameters_) return fn();
  return zero_[local]->run_forward(fn);
}

torch::Tensor StageReplicas::to_compute(int local, const torch::Tensor& t) const {
  return zero_.empty() ? t : zero_.at(size_t(local))->to_compute(t);
}

std::vector<std::pair<std::string, torch::Tensor>> StageReplicas::full_parameters(int local) {
  return zero_.at(size_t(local))->full_parameters();
}

void StageReplicas::step_zero() {
  for (auto& engine : zero_) engine->step();
}

}  // namespace cohort::pipeline::detail

namespace cohort::pipeline {

ZeroEngineCore& Pipeline::zero_engine(int local) const {
  COHORT_CHECK_KIND(kInvalidArgument, local >= 0 && local < impl_->replicas->zero_engines(), "Pipeline::zero_engine(",
                    local, "): this rank has ", impl_->replicas->zero_engines(),
                    " ZeRO engine(s) (PipelineOptions::zero: one per local stage)");
  return impl_->replicas->zero_engine(local);
}

void Pipeline::optimizer_step() {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->replicas->has_zero(),
                    "Pipeline::optimizer_step: this pipeline has no ZeRO engines "
                    "(PipelineOptions::zero is not set): step an optimizer over Pipeline::parameters() instead");
  impl_->optimizer_step();
}

}  // namespace cohort::pipeline
