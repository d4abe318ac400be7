// Pipeline parallelism: a torch::nn::Sequential split into stages across the ranks of a Comm, run one
// step at a time on microbatches by a schedule (cohort/pipeline_schedule.h: GPipe, 1F1B, interleaved).
// Each rank holds its stages' parameters only; step() returns the batch's mean loss on every rank and
// leaves the gradients in the stages' parameters, so the user's optimizer steps as usual. With a data
// Comm, each stage's replicas average their gradients with cohort DDP (or shard their optimizer state
// with ZeRO) once per step. Checkpoints save each stage's shard by whole-model names. See docs/pipeline.md.
#pragma once

#include <torch/arg.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/ddp.h"
#include "cohort/export.h"
#include "cohort/pipeline_schedule.h"
#include "cohort/stateful.h"
#include "cohort/zero.h"

COHORT_EXPORT_BEGIN
namespace cohort {
namespace pipeline {

/// How partition() cuts a Sequential (DeepSpeed's partition_method).
struct PartitionOptions {
  /// "parameters": contiguous stages with balanced trainable parameter counts (the most loaded stage
  /// as light as possible); "uniform": balanced layer counts. Ignored when `boundaries` is given.
  TORCH_ARG(std::string, method) = "parameters";
  /// Explicit cut: stage s holds layers [boundaries[s], boundaries[s + 1]); stages + 1 increasing
  /// numbers from 0 to the layer count.
  TORCH_ARG(std::vector<int64_t>, boundaries) = {};
};

/// A Sequential cut into stages. The stages share the layers (and parameters) of the model they were
/// cut from, and keep its layer names ("3.weight"), so checkpoints name parameters as the whole model.
struct Partition {
  std::vector<torch::nn::Sequential> stages;
  std::vector<int64_t> boundaries;  ///< stages + 1 layer indices
  std::vector<int64_t> parameters;  ///< trainable parameters per stage
  /// One line per stage: "stage 1: layers 3-5 (Linear, ReLU, Linear), 4160 parameters".
  std::string describe() const;
};

/// Cuts `model` into `stages` stages of at least one layer each; bad options throw naming the option.
Partition partition(const torch::nn::Sequential& model, int stages, const PartitionOptions& options = {});
/// The first layer of each stage and the layer count (pure: tested alone). `layer_parameters[i]` is
/// layer i's trainable parameter count.
std::vector<int64_t> partition_boundaries(const std::vector<int64_t>& layer_parameters, int stages,
                                          const std::string& method);
/// The stages a rank runs: s, s + ranks, s + 2 ranks ... (Schedule::rank_of).
std::vector<torch::nn::Sequential> stages_of_rank(const Partition& partition, int ranks, int rank);

/// The loss of the last stage's output on one microbatch and its targets (a mean over the microbatch).
using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

/// The whole model's name of a stage's parameter or buffer, from its name in the stage's Sequential.
using ParameterNames = std::function<std::string(const std::string& stage_name)>;

/// Builds a ZeRO engine's optimizer over its fp32 shard tensors (EngineOptions::optimizer_factory).
using ZeroOptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct PipelineOptions {
  /// "gpipe", "1f1b" or "interleaved" (make_schedule); ignored when a Schedule is given.
  TORCH_ARG(std::string, schedule) = "1f1b";
  /// Microbatches per step: the batch is split as torch.tensor_split does (uneven when it does not divide;
  /// a batch of fewer rows than chunks, an epoch's short last one, leaves the last microbatches empty).
  TORCH_ARG(int, chunks) = 4;
  /// Stages each rank holds ("interleaved" only; 1 otherwise).
  TORCH_ARG(int, stages_per_rank) = 1;
  /// Required: the loss of a microbatch (e.g. cross entropy with its default mean reduction).
  TORCH_ARG(LossFn, loss_fn) = nullptr;
  /// Keep only each stage's input between forward and backward and run the forward again in backward
  /// (less memory, one more forward). Layers drawing random numbers (dropout) draw anew.
  TORCH_ARG(bool, recompute) = false;
  /// Data parallel: the Comm of this stage's replicas (Mesh::group_ptr("data")); each stage is then
  /// wrapped in cohort DDP over it, its gradients averaged once per step, after its last microbatch.
  TORCH_ARG(std::shared_ptr<Comm>, data_comm) = nullptr;
  /// Options of those DDP wrappers (their `comm` is data_comm).
  TORCH_ARG(DDPOptions, ddp) = {};
  /// ZeRO over the data group instead of DDP (needs data_comm): each stage is given to a ZeRO engine
  /// of this config over data_comm, which shards the stage's optimizer state over its replicas and
  /// reduce-scatters its gradients once per step, in the backward of its last microbatch. Step with
  /// Pipeline::optimizer_step() (no optimizer of one's own). zero_optimization.stage 1 or 2, or 3 (FSDP
  /// per stage: the stage's parameters sharded too, each sharding unit, a Sequential entry by default,
  /// gathered for each microbatch's forward and backward, and every microbatch's gradients
  /// reduce-scattered into the shard's; not with recompute), fp32 or bf16 (the last stage's output cast to
  /// fp32 before loss_fn), gradient_accumulation_steps 1, no
  /// gradient_clipping (an engine sees one stage's gradients only).
  TORCH_ARG(std::optional<ZeroConfig>, zero) = std::nullopt;
  /// The engines' optimizer over their fp32 shards when the config has no "optimizer"
  /// (EngineOptions::optimizer_factory), e.g. a torch::optim::Adam of the shard tensors.
  TORCH_ARG(ZeroOptimizerFactory, zero_optimizer) = nullptr;
  /// Names in checkpoints and full_parameters(): each stage parameter's and buffer's name in the whole
  /// model, from its name in the stage ("4.transformer.h.3.ln_1.weight" -> "transformer.h.3.ln_1.weight",
  /// models/gpt.h's gpt_pipeline_name), for layers that wrap a model's own modules. Null: the stages'
  /// names ("3.weight"). Parameters of two stages given one name are one weight tied across the stages
  /// (a GPT's token embedding and output head): they start equal (the first stage's) and every step
  /// their gradients are summed between the ranks holding them before any optimizer steps; a
  /// checkpoint holds one. Each must be on another rank; under ZeRO stage 3 the layer holding it is a
  /// sharding unit of its own (every stage entry without marked units is one), not at stages 1-2.
  TORCH_ARG(ParameterNames, parameter_names) = nullptr;
};

namespace detail {
class PipelineImpl;
}

/// Runs this rank's stages in a pipeline over `comm` (the pipeline group: one rank per position).
/// Every rank of `comm` constructs it with its own stages (stages_of_rank) and calls step() together.
class Pipeline {
 public:
  /// The schedule named by options.schedule(), built for comm.size() ranks and options.chunks().
  Pipeline(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages, PipelineOptions options);
  /// A schedule of one's own (checked with validate()); its ranks must be comm.size().
  Pipeline(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages, Schedule schedule,
           PipelineOptions options);
  ~Pipeline();
  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;

  /// One training step's forward and backward: `inputs` matter on the rank of stage 0, `targets` on
  /// the rank of the last stage (others may pass undefined tensors). Gradients accumulate into the
  /// stages' parameters (zero them before, step the optimizer after). Each microbatch's loss counts
  /// with weight rows / batch rows, so the result is the mean loss of the whole batch on every rank.
  /// A failure on any rank (a stage that throws, a dead rank) raises on every rank naming it.
  torch::Tensor step(const torch::Tensor& inputs, const torch::Tensor& targets);
  /// Inference on the whole batch (no gradients): the last stage's output, on every rank.
  torch::Tensor forward(const torch::Tensor& inputs);

  /// This rank's stage numbers and modules, in stage order.
  const std::vector<int>& stage_ids() const;
  const std::vector<torch::nn::Sequential>& stages() const;
  /// Trainable parameters of this rank's stages (for the optimizer). Under ZeRO stage 3 they are
  /// sharded between steps: read them with full_parameters().
  std::vector<torch::Tensor> parameters() const;
  /// This rank's stages' trainable parameters whole, by their names in the whole model ("3.weight"),
  /// as copies (with PipelineOptions::zero gathered from the engines' fp32 masters: a collective over
  /// the data group, all its ranks call it).
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters();
  const Schedule& schedule() const;
  /// The most microbatches whose activations this rank held at once during the last step (all stages).
  int peak_activations() const;
  /// With PipelineOptions::zero: each stage's engine steps its optimizer on its shard and gathers the
  /// parameters back, then zeroes the gradients (call after step()). Without it, throws: step an
  /// optimizer of parameters() instead.
  void optimizer_step();

  /// Checkpoints (cohort/checkpoint.h): this rank's stages' parameters and buffers, named as in the
  /// whole model ("3.weight"), each written once by one of the ranks holding it (StateKind::kOwned).
  /// Loading takes each tensor by name, so a checkpoint loads at the same or another partition and
  /// stage count; cohort-ckpt consolidate makes the whole model of it. Add it on every rank:
  ///   state.add("model", pipeline.model_state()).add("optimizer", pipeline.optimizer_state(opt));
  /// The stages must keep the whole model's layer names (partition() and stages_of_rank() do). The
  /// Stateful refers to this Pipeline (and optimizer_state's to the optimizer): keep them alive with it.
  std::shared_ptr<Stateful> model_state();
  /// The per-parameter state of `optimizer` (built over parameters()) by parameter name
  /// ("3.weight.exp_avg", "3.weight.step"), and each group's learning rate.
  std::shared_ptr<Stateful> optimizer_state(torch::optim::Optimizer& optimizer);
  /// With PipelineOptions::zero (model_state() and optimizer_state() refuse it): every local stage's
  /// engine by parameter, each parameter's fp32 master and optimizer state one tensor of its whole shape
  /// under its whole-model name ("3.weight.master", "3.weight.exp_avg"), sharded over the stage's data
  /// group; its buffers owned by the stage. It loads at another partition, data-parallel size or ZeRO
  /// sharding of the same stage:  state.add("zero", pipeline.zero_state());
  std::shared_ptr<Stateful> zero_state();
  /// With PipelineOptions::zero: local stage `local`'s engine (its optimizer, learning rate, memory).
  ZeroEngineCore& zero_engine(int local = 0) const;
  /// The whole pipeline's cut, known on every rank: "2 stages (layers 0-5 | 6-10)".
  std::string describe_partition() const;

 private:
  std::unique_ptr<detail::PipelineImpl> impl_;
};

}  // namespace pipeline
}  // namespace cohort
COHORT_EXPORT_END
