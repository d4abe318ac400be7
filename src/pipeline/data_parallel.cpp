// The data-parallel side of a pipeline with ZeRO over the data group: each local stage is given to a
// ZeRO engine over data_comm. Between microbatches gradients accumulate in the engine's flat
// gradient buffer (its hooks only keep the aliases); the backward of a stage's last microbatch goes
// through the engine, which reduce-scatters as gradients become ready, and optimizer_step() steps
// each engine on its shard. (DDP per stage is made in pipeline.cpp and held back by no_sync.)
#include <torch/torch.h>

#include "core/check.h"
#include "pipeline/pipeline_impl.h"

namespace cohort::pipeline::detail {

void PipelineImpl::make_zero_engines() {
  const ZeroConfig& config = *options_.zero();
  COHORT_CHECK_KIND(kInvalidArgument, options_.data_comm(),
                    "Pipeline: PipelineOptions::zero needs PipelineOptions::data_comm (the "
                    "replicas of a stage to shard over, e.g. Mesh::group_ptr(\"data\"))");
  const int stage = config.zero_optimization().stage();
  COHORT_CHECK_KIND(kInvalidArgument, stage == 1 || stage == 2,
                    "Pipeline: PipelineOptions::zero has zero_optimization.stage ", stage,
                    "; a pipeline runs ZeRO stage 1 or 2 over its data group (stage 3 would free a stage's parameters "
                    "between the microbatches that use them; stage 0 is DDP: use PipelineOptions::ddp)");
  COHORT_CHECK_KIND(kInvalidArgument, !config.fp16().enabled() && !config.bf16().enabled(),
                    "Pipeline: PipelineOptions::zero has ", config.fp16().enabled() ? "fp16" : "bf16",
                    " enabled; a pipeline's ZeRO engines run in fp32 "
                    "(activations cross stages in the stages' own dtype)");
  COHORT_CHECK_KIND(kInvalidArgument, config.gradient_accumulation_steps() == 1,
                    "Pipeline: PipelineOptions::zero has "
                    "gradient_accumulation_steps ",
                    config.gradient_accumulation_steps(),
                    "; the pipeline's microbatches are its accumulation (PipelineOptions::chunks): use 1");
  COHORT_CHECK_KIND(kInvalidArgument, config.gradient_clipping() == 0.0,
                    "Pipeline: PipelineOptions::zero has gradient_clipping ", config.gradient_clipping(),
                    "; each engine sees one stage's gradients only, not the whole "
                    "model's norm: use 0");
  auto engine_options = EngineOptions().comm(options_.data_comm()).optimizer_factory(options_.zero_optimizer());
  for (const auto& module : stages)
    zero.push_back(std::make_unique<ZeroEngineCore>(module.ptr(), config, engine_options));
}

void PipelineImpl::backward_of(int local, int microbatch, const torch::Tensor& root, const torch::Tensor& grad) {
  if (zero.empty() || microbatch != last_backward_[local]) {
    if (grad.defined()) torch::autograd::backward({root}, {grad});
    else torch::autograd::backward({root});
    return;
  }
  // The engine runs backward from a scalar: sum(output * grad) gives the stage's graph the same
  // gradient as backward(output, grad).
  zero[local]->backward(grad.defined() ? (root * grad).sum() : root);
}

}  // namespace cohort::pipeline::detail

namespace cohort::pipeline {

void Pipeline::optimizer_step() {
  COHORT_CHECK_KIND(kInvalidArgument, !impl_->zero.empty(),
                    "Pipeline::optimizer_step: this pipeline has no ZeRO engines "
                    "(PipelineOptions::zero is not set): step an optimizer over Pipeline::parameters() instead");
  for (auto& engine : impl_->zero) engine->step();
}

}  // namespace cohort::pipeline
