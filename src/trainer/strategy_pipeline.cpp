// "pipeline": the module's network cut into stages across the ranks of each pipeline
// (cohort::pipeline), the world laid out as (world / stages) pipelines side by side with each stage
// averaging its gradients over its replicas (the Pipeline's DDP over the "data" axis). A training
// step is the Pipeline's: every stage's forward on microbatches, TrainingModule::loss at the last
// stage, backward; the loss comes back on every rank. Evaluation runs Pipeline::forward, whose output
// reaches every rank, so validation_step and test_step run unchanged. Every rank of a pipeline reads
// the same batches (the data is split over the pipelines only).

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
#include "trainer/strategy.h"

namespace cohort::detail {
namespace {

class PipelineStrategy : public ModuleOptimizerStrategy {
 public:
  PipelineStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : ModuleOptimizerStrategy(options), module_(module), world_(world) {
    COHORT_CHECK_KIND(
        kInvalidArgument, module.has_network(),
        "strategy \"pipeline\" cuts a torch::nn::Sequential network into stages, but "
        "this TrainingModule has its own layers (made with TrainingModule()): give it a Sequential, or use "
        "strategy ddp or fsdp");
    const int stages = options.raw.pipeline_stages() > 0 ? int(options.raw.pipeline_stages()) : world.size();
    COHORT_CHECK_KIND(kInvalidArgument, world.size() % stages == 0, "TrainerOptions.pipeline_stages ", stages,
                      " does not divide the ", world.size(),
                      " ranks: the world is (ranks / stages) pipelines of one rank per stage");
    std::shared_ptr<Comm> data_comm;
    pipe_comm_ = world.comm_ptr();
    if (stages < world.size()) {
      mesh_.emplace(world.comm(), std::vector<MeshDim>{{"data", world.size() / stages}, {"pipe", stages}});
      pipe_comm_ = mesh_->group_ptr("pipe");
      data_comm = mesh_->group_ptr("data");
    }
    partition_ = pipeline::partition(module.network(), stages);
    auto loss = [this, &module](const torch::Tensor& output, const torch::Tensor& target) {
      return per_micro_batch(module.loss(output, target));
    };
    auto pipeline_options = pipeline::PipelineOptions()
                                .schedule(options.raw.pipeline_schedule())
                                .chunks(int(options.raw.pipeline_chunks()))
                                .loss_fn(loss)
                                .data_comm(data_comm);
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
  MemoryReport memory_report() const override {
    return zero_per_stage() > 0 ? pipeline_->zero_engine(0).memory_report() : ModuleOptimizerStrategy::memory_report();
  }

  std::pair<int, int> data_split(const World&) const override {
    if (!mesh_) return {1, 0};
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

  void add_to(CheckpointState& state) override {
    if (zero_per_stage() > 0) {
      if (!model_state_) model_state_ = pipeline_->zero_state();
      state.add("zero", model_state_);
      return;
    }
    if (!model_state_) model_state_ = pipeline_->model_state();
    if (!optimizer_state_) optimizer_state_ = pipeline_->optimizer_state(*optimizer_);
    state.add("model", model_state_).add("optimizer", optimizer_state_);
  }

  // Every rank's copy of the network (its stages' layers are the network's own).
  void load_pretrained(const std::string& path, const StateDictOptions& options) override {
    COHORT_CHECK_KIND(kInvalidArgument, zero_per_stage() == 0,
                      "TrainerOptions.pretrained_weights with pipeline_zero_stage ", zero_per_stage(),
                      ": the stages' ZeRO engines were made from the network's weights already; load "
                      "them into the network in configure_model (cohort::load_pretrained), or use "
                      "pipeline_zero_stage 0");
    cohort::load_pretrained(*module_.network(), path, options);
  }

  // Every parameter from the rank of the stage that trains it (the other ranks' copies are stale; under
  // ZeRO the stage's are gathered from its engine's shards first).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    std::map<std::string, torch::Tensor> mine;
    if (zero_per_stage() > 0)
      for (auto& [name, value] : pipeline_->full_parameters()) mine[name] = value;
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : module_.network()->named_parameters()) {
      const auto gathered = mine.find(item.key());
      torch::Tensor value = gathered != mine.end() ? gathered->second.to(torch::kCPU, torch::kFloat).contiguous()
                            : zero_per_stage() > 0 ? torch::empty(item.value().sizes(), torch::kFloat)
                                                   : item.value().detach().to(torch::kCPU, torch::kFloat).clone();
      pipe_comm_->broadcast(value, owner_of(item.key()));
      out.emplace_back(item.key(), value);
    }
    return out;
  }

  std::string describe() const override {
    const int pipelines = mesh_ ? mesh_->size("data") : 1;
    return "pipeline (" + pipeline_->describe_partition() + ", " + options_.raw.pipeline_schedule() + ", " +
           std::to_string(options_.raw.pipeline_chunks()) + " microbatches" +
           (pipelines > 1 ? ", " + std::to_string(pipelines) + " pipelines" : "") +
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
    options.zero(ZeroConfig().zero_optimization(ZeroOptimizationConfig().stage(int(zero_per_stage()))))
        .zero_optimizer([owner](std::vector<torch::Tensor> shards) {
          auto optimizer = owner->configure_optimizers(std::move(shards));
          COHORT_CHECK_KIND(kInvalidArgument, optimizer != nullptr, "configure_optimizers returned no optimizer");
          return optimizer;
        });
  }

  // The pipeline rank holding the layer a parameter name ("3.weight") starts with.
  int owner_of(const std::string& name) const {
    const int64_t layer = std::stoll(name.substr(0, name.find('.')));
    const auto& cuts = partition_.boundaries;
    const auto stage = std::upper_bound(cuts.begin(), cuts.end(), layer) - cuts.begin() - 1;
    return int(stage) % pipe_comm_->size();
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
  std::optional<pipeline::Pipeline> pipeline_;
  std::shared_ptr<Stateful> model_state_, optimizer_state_;
};

}  // namespace

std::unique_ptr<Strategy> make_pipeline_strategy(const ResolvedOptions& options, TrainingModule& module,
                                                 const World& world) {
  return std::make_unique<PipelineStrategy>(options, module, world);
}

}  // namespace cohort::detail
