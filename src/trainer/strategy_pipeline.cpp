// "pipeline": the module's network (or the layers its pipeline_layers() gives) cut into stages across
// the ranks of each pipeline (cohort::pipeline), the world a mesh {pipe, data, tensor_parallel}
// (torchtitan's order: a stage's replicas and tensor-parallel ranks side by side, the stages outermost):
// world / (stages x tp) pipelines, each stage averaging its gradients over its replicas (the Pipeline's
// DDP over "data", or ZeRO with pipeline_zero_stage), each stage's layers split over "tensor_parallel"
// by the module's configure_model. A training step is the Pipeline's: every stage's forward on
// microbatches, TrainingModule::loss at the last stage, backward; the loss comes back on every rank.
// Evaluation runs Pipeline::forward, whose output reaches every rank, so validation_step and test_step
// run unchanged. The ranks of a pipeline and of a tp group read the same batches (the data is split
// over "data" only). Checkpoints and full parameters use the module's names (pipeline_parameters.h).

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "cohort/error.h"
#include "cohort/mesh.h"
#include "cohort/pipeline.h"
#include "cohort/safetensors.h"
#include "cohort/zero.h"
#include "core/check.h"
#include "trainer/pipeline_parameters.h"
#include "trainer/strategy.h"
#include "trainer/whole_tensor_state.h"
#include "zero/parameter_state.h"

namespace cohort::detail {
namespace {

class PipelineStrategy : public ModuleOptimizerStrategy {
 public:
  PipelineStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : ModuleOptimizerStrategy(options), module_(module), world_(world) {
    const auto layers = layers_of(module);
    const int tp = int(options.raw.tensor_parallel_size());
    const int stages = options.raw.pipeline_stages() > 0 ? int(options.raw.pipeline_stages()) : world.size() / tp;
    COHORT_CHECK_KIND(kInvalidArgument, world.size() % (stages * tp) == 0, "TrainerOptions.pipeline_stages ", stages,
                      tp > 1 ? " x tensor_parallel_size " + std::to_string(tp) : std::string(), " does not divide the ",
                      world.size(), " ranks: the world is (ranks / stages) pipelines of one rank per stage");
    const int data = world.size() / (stages * tp);
    COHORT_CHECK_KIND(kInvalidArgument, options.raw.gradient_clip_val() == 0 || (tp == 1 && !layers.names),
                      "TrainerOptions.gradient_clip_val ", options.raw.gradient_clip_val(),
                      " with strategy \"pipeline\" ",
                      tp > 1 ? "and tensor_parallel_size " + std::to_string(tp) : std::string("of named layers"),
                      ": the norm over cut and tied weights is not built; use 0");
    COHORT_CHECK_KIND(kInvalidArgument, options.raw.accumulate_grad_batches() == 1 || !layers.names,
                      "TrainerOptions.accumulate_grad_batches ", options.raw.accumulate_grad_batches(),
                      " with strategy \"pipeline\" of a module's pipeline_layers(): weights tied across its stages "
                      "have their gradients summed at every batch; raise pipeline_chunks instead");
    std::shared_ptr<Comm> data_comm;
    pipe_comm_ = world.comm_ptr();
    if (data > 1 || tp > 1) {
      mesh_.emplace(world.comm(), std::vector<MeshDim>{{"pipe", stages}, {"data", data}, {"tensor_parallel", tp}});
      pipe_comm_ = mesh_->group_ptr("pipe");
      if (data > 1) data_comm = mesh_->group_ptr("data");
    }
    partition_ = agreed_partition(layers.layers, stages, world.comm());
    // The cuts are read before the stages' ZeRO engines take the parameters.
    parameters_by_name_.emplace(layers.layers, layers.names, partition_.boundaries, stages);
    auto loss = [this, &module](const torch::Tensor& output, const torch::Tensor& target) {
      return per_micro_batch(module.loss(output, target));
    };
    auto pipeline_options = pipeline::PipelineOptions()
                                .schedule(options.raw.pipeline_schedule())
                                .chunks(int(options.raw.pipeline_chunks()))
                                .loss_fn(loss)
                                .data_comm(data_comm)
                                .parameter_names(layers.names);
    if (zero_per_stage() > 0) add_zero(pipeline_options, module, world, stages);
    pipeline_.emplace(pipe_comm_, pipeline::stages_of_rank(partition_, stages, pipe_comm_->rank()),
                      std::move(pipeline_options));
    if (zero_per_stage() == 0) make_optimizer(module, pipeline_->parameters());
  }

  // With pipeline_zero_stage the stages' engines hold the optimizer (the module's, over their shards).
  void step() override {
    if (zero_per_stage() == 0) return ModuleOptimizerStrategy::step();
    pipeline_->optimizer_step();
  }
  torch::optim::Optimizer& optimizer() override {
    return zero_per_stage() > 0 ? pipeline_->zero_engine(0).optimizer() : ModuleOptimizerStrategy::optimizer();
  }
  double lr() const override {
    if (zero_per_stage() == 0) return ModuleOptimizerStrategy::lr();
    return pipeline_->zero_engine(0).lr();
  }
  // The stages' engines' stage: memory plans and shard_ranks() then count a stage's shards.
  int zero_stage() const override { return int(zero_per_stage()); }
  MemoryReport memory_report() const override {
    return zero_per_stage() > 0 ? pipeline_->zero_engine(0).memory_report() : ModuleOptimizerStrategy::memory_report();
  }

  std::pair<int, int> data_split(const World&) const override {
    if (!mesh_ || mesh_->size("data") == 1) return {1, 0};
    return {mesh_->size("data"), mesh_->coordinate("data")};
  }

  torch::Tensor training_step(TrainingModule&, Batch& batch, int64_t) override {
    const torch::Tensor loss = pipeline_->step(batch.data, batch.target);
    const int64_t accumulate = options_.raw.accumulate_grad_batches();
    return accumulate > 1 ? loss * static_cast<double>(accumulate) : loss;
  }

  torch::Tensor forward(const torch::Tensor& input) override { return pipeline_->forward(input); }
  torch::Tensor run_forward(const std::function<torch::Tensor()>&) override {
    COHORT_CHECK_KIND(kInvalidArgument, false,
                      "Trainer::run_forward: strategy \"pipeline\" holds one stage of the model on "
                      "each rank, so the module's layers cannot run whole on one; evaluate "
                      "through Trainer::validate or Trainer::test");
    return {};
  }

  void backward(const torch::Tensor&, bool) override {}  // the pipeline's step ran it, stage by stage

  // By the module's names: with ZeRO each stage's engine by parameter under "engine", as strategy
  // zero1-3 and fsdp save it (either loads the other's); tensor-parallel cuts saved whole.
  void add_to(CheckpointState& state) override {
    if (zero_per_stage() > 0) {
      if (!model_state_) model_state_ = engines_parameter_state(engines(), engine_state_options());
      state.add("engine", model_state_);
      return;
    }
    if (!model_state_) model_state_ = whole(pipeline_->model_state());
    if (!optimizer_state_) optimizer_state_ = whole(pipeline_->optimizer_state(*optimizer_));
    state.add("model", model_state_).add("optimizer", optimizer_state_);
  }

  // Every rank's copy of the network (its stages' layers are the network's own).
  void load_pretrained(const std::string& path, const StateDictOptions& options) override {
    COHORT_CHECK_KIND(kInvalidArgument, zero_per_stage() == 0,
                      "TrainerOptions.pretrained_weights with pipeline_zero_stage ", zero_per_stage(),
                      ": the stages' ZeRO engines were made from the network's weights already; load "
                      "them into the network in configure_model (cohort::load_pretrained), or use "
                      "pipeline_zero_stage 0");
    load_pretrained_parts(module_.model(), path, options, tensor_parallel_parts(module_cuts(module_.model())));
  }

  // Every parameter from the rank of the stage that trains it (the other ranks' copies are stale; under
  // ZeRO the stage's are gathered from its engine's shards first), whole.
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    return parameters_by_name_->full_parameters(pipeline_->full_parameters(), *pipe_comm_);
  }

  std::string describe() const override {
    const int pipelines = mesh_ ? mesh_->size("data") : 1;
    return "pipeline (" + pipeline_->describe_partition() + ", " + options_.raw.pipeline_schedule() + ", " +
           std::to_string(options_.raw.pipeline_chunks()) + " microbatches" +
           (pipelines > 1 ? ", " + std::to_string(pipelines) + " pipelines" : "") +
           (mesh_ && mesh_->size("tensor_parallel") > 1
                ? ", " + std::to_string(mesh_->size("tensor_parallel")) + " tensor parallel per stage"
                : "") +
           (zero_per_stage() == 3  ? ", FSDP per stage"
            : zero_per_stage() > 0 ? ", ZeRO stage " + std::to_string(zero_per_stage()) + " per stage"
                                   : "") +
           ")";
  }

 private:
  int64_t zero_per_stage() const { return options_.raw.pipeline_zero_stage(); }

  // The stages' ZeRO engines over their replicas, stepping the module's optimizer over their shards.
  void add_zero(pipeline::PipelineOptions& options, TrainingModule& module, const World& world, int stages) const {
    COHORT_CHECK_KIND(kInvalidArgument, options.data_comm() != nullptr, "TrainerOptions.pipeline_zero_stage ",
                      zero_per_stage(), " shards each stage over its replicas, but the world's ", world.size(),
                      " rank(s) are ", stages,
                      " stage(s) of one pipeline: set pipeline_stages so that it divides "
                      "the world at least twice");
    TrainingModule* owner = &module;
    ZeroConfig config = ZeroConfig().zero_optimization(ZeroOptimizationConfig().stage(int(zero_per_stage())));
    if (options_.precision == Precision::kBf16Mixed) config.bf16().enabled(true);
    options.zero(config).zero_optimizer([owner](std::vector<torch::Tensor> shards) {
      auto optimizer = owner->configure_optimizers(std::move(shards));
      COHORT_CHECK_KIND(kInvalidArgument, optimizer != nullptr, "configure_optimizers returned no optimizer");
      return optimizer;
    });
  }

  // Every rank cuts where world rank 0 cuts: a tensor-parallel cut of an uneven size (a vocabulary the
  // tp size does not divide) changes the parameter counts a balanced cut weighs, from rank to rank.
  static pipeline::Partition agreed_partition(const torch::nn::Sequential& layers, int stages, Comm& world) {
    auto mine = pipeline::partition(layers, stages);
    auto bounds = torch::tensor(mine.boundaries, torch::kLong);
    world.broadcast(bounds, 0);
    const std::vector<int64_t> agreed(bounds.data_ptr<int64_t>(), bounds.data_ptr<int64_t>() + bounds.numel());
    if (agreed == mine.boundaries) return mine;
    return pipeline::partition(layers, stages, pipeline::PartitionOptions().boundaries(agreed));
  }

  // The network, or the layers a module with its own gives.
  static TrainingModule::PipelineLayers layers_of(TrainingModule& module) {
    if (module.has_network()) return {module.network(), nullptr};
    auto layers = module.pipeline_layers();
    COHORT_CHECK_KIND(kInvalidArgument, !layers.layers.is_empty(),
                      "strategy \"pipeline\" cuts a torch::nn::Sequential into stages, but this TrainingModule has "
                      "its own layers and its pipeline_layers() gives none: give it a Sequential, override "
                      "pipeline_layers() (models/gpt_pipeline.h does it for the GPT), or use strategy ddp or fsdp");
    return layers;
  }

  std::vector<ZeroEngineCore*> engines() const {
    std::vector<ZeroEngineCore*> out;
    for (int local = 0; local < int(pipeline_->stages().size()); ++local) out.push_back(&pipeline_->zero_engine(local));
    return out;
  }
  ParameterStateOptions engine_state_options() const {
    ParameterStateOptions out;
    out.module_kind = StateKind::kOwned;  // a stage's buffers, held by its ranks only
    out.name_of = parameters_by_name_->names();
    if (parameters_by_name_->any_cut()) {
      const PipelineParameters* by_name = &*parameters_by_name_;
      out.part_of = tensor_parallel_part_of([by_name](const std::string& name) { return by_name->cut_of_layer(name); });
    }
    return out;
  }
  // Under tensor parallelism a stage's tensors (and optimizer states) saved whole, by the module's names.
  std::shared_ptr<Stateful> whole(std::shared_ptr<Stateful> inner) const {
    if (!parameters_by_name_->any_cut()) return inner;
    const PipelineParameters* by_name = &*parameters_by_name_;
    return whole_tensor_state(std::move(inner),
                              [by_name](const std::string& name) { return by_name->cut_of_whole(name); });
  }

  // Clipping by the norm over every stage's gradients, as one process would (each rank holds a part).
  void clip_gradients(double max_norm) override {
    torch::Tensor squares = torch::zeros({1}, torch::kFloat64);
    for (const auto& p : parameters_)
      if (p.grad().defined()) squares += p.grad().detach().to(torch::kCPU, torch::kFloat64).pow(2).sum();
    const double norm = std::sqrt(pipe_comm_->allreduce(squares).item<double>());
    const double scale = max_norm / (norm + 1e-6);  // clip_grad_norm_'s epsilon
    if (scale >= 1.0) return;
    for (const auto& p : parameters_)
      if (p.grad().defined()) p.grad().mul_(scale);
  }

  TrainingModule& module_;
  World world_;
  std::optional<Mesh> mesh_;
  std::shared_ptr<Comm> pipe_comm_;
  pipeline::Partition partition_;
  std::optional<PipelineParameters> parameters_by_name_;
  std::optional<pipeline::Pipeline> pipeline_;
  std::shared_ptr<Stateful> model_state_, optimizer_state_;
};

}  // namespace

std::unique_ptr<Strategy> make_pipeline_strategy(const ResolvedOptions& options, TrainingModule& module,
                                                 const World& world) {
  return std::make_unique<PipelineStrategy>(options, module, world);
}

}  // namespace cohort::detail
