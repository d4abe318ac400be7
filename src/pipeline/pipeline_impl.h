// PipelineImpl: what a Pipeline holds and how one step runs. The constructor checks the stages against
// the schedule, learns the whole cut and gives the stages their replicas over the data group
// (stage_replicas.h); step() runs this rank's actions (step_actions.h) and returns the broadcast mean
// loss; forward() runs inference through the stages.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/pipeline.h"
#include "pipeline/stage_placement.h"
#include "pipeline/stage_replicas.h"
#include "pipeline/tied_parameters.h"
#include "pipeline/transfer.h"

namespace cohort::pipeline::detail {

class PipelineImpl {
 public:
  PipelineImpl(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages, Schedule schedule,
               PipelineOptions options);
  PipelineImpl(const PipelineImpl&) = delete;  // placement_ refers to this object's members
  PipelineImpl& operator=(const PipelineImpl&) = delete;

  torch::Tensor step(const torch::Tensor& inputs, const torch::Tensor& targets);
  torch::Tensor forward(const torch::Tensor& inputs);
  /// With ZeRO: the tied weights' gradient shards summed, then each stage's engine stepped; a failure
  /// on any rank raises on every rank, as in step().
  void optimizer_step();

  std::vector<int> stage_ids;
  std::vector<torch::nn::Sequential> stages;
  Schedule schedule;
  int peak_activations = 0;
  std::vector<int64_t> layer_bounds;        // the whole cut: stages + 1 layer indices (note "layer ranges")
  bool names_whole_model = true;            // the stages' layers are named by their place in the whole model
  int64_t trainable_params = 0;             // the whole pipeline's parameters that require grad, each stage once
  std::unique_ptr<StageReplicas> replicas;  // DDP or ZeRO per local stage over PipelineOptions::data_comm
  std::unique_ptr<TiedParameters> tied;     // with PipelineOptions::parameter_names

  /// A stage parameter's or buffer's name in checkpoints (PipelineOptions::parameter_names).
  std::string whole_name(const std::string& stage_name) const {
    return options_.parameter_names() ? options_.parameter_names()(stage_name) : stage_name;
  }
  const PipelineOptions& options() const { return options_; }

  /// Throws naming `what` when checkpoints cannot name this pipeline's tensors as the whole model.
  void check_whole_model_names(const char* what) const;
  /// The same, and when its weights live in ZeRO engines (model_state() and optimizer_state()).
  void check_checkpointable(const char* what) const;

 private:
  void check_stages() const;
  /// Runs body(); a failure in it (this rank's or a peer's) raises on every rank through fail().
  void failing_on_every_rank(const char* what, const std::function<void()>& body);
  torch::Tensor broadcast_loss(const torch::Tensor& loss_sum);
  /// Tells every peer (and the data group) that this rank failed, then throws `message` with the kind
  /// and ranks of the error behind it.
  [[noreturn]] void fail(const std::string& message, ErrorKind kind = ErrorKind::kOther,
                         const std::vector<int>& ranks = {});

  std::shared_ptr<Comm> comm_;
  int rank_ = 0;
  PipelineOptions options_;
  StagePlacement placement_{schedule, rank_, stages};
  torch::Device device_{torch::kCPU};
};

/// The whole cut of a pipeline: every rank's stages' layer ranges gathered over `comm` (note "layer
/// ranges"): stages + 1 layer bounds, and whether the stages keep the whole model's layer names.
struct StageCut {
  std::vector<int64_t> bounds;
  bool names_whole_model = true;
  int64_t trainable_params = 0;
};
StageCut gather_stage_cut(Comm& comm, const Schedule& schedule, const std::vector<torch::nn::Sequential>& stages);

/// "2 stages (layers 0-5 | 6-10)".
std::string describe_bounds(const std::vector<int64_t>& bounds);

}  // namespace cohort::pipeline::detail
