// One training step's actions on this rank, in the schedule's order: forwards and backwards of a stage
// on a microbatch, and the sends and receives between stages, with what each stage keeps between its
// forward and its backward.
//
// Note "receive at need": sends never wait (cohort's isend posts and returns), and a receive is posted
// at its RECV action but waited for only when the forward or backward that needs it runs, which is the
// order the schedule's validate() proves free of waiting cycles.
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "cohort/pipeline.h"
#include "pipeline/stage_placement.h"
#include "pipeline/stage_replicas.h"
#include "pipeline/transfer.h"

namespace cohort::pipeline::detail {

/// What one stage keeps for one microbatch between its forward and its backward.
struct Slot {
  torch::Tensor input;       // the stage's input (requires grad past stage 0)
  torch::Tensor output;      // the stage's output with its graph (none under recompute)
  torch::Tensor loss;        // last stage: the microbatch's loss with its graph (none under recompute)
  torch::Tensor input_grad;  // after backward: the gradient to send to the previous stage
  std::vector<int64_t> output_sizes;
  torch::TensorOptions output_options;
  ActivationReceive input_receive;  // RECV_F posted, waited in F
  torch::Tensor grad_buffer;        // RECV_B's tensor
  Work grad_work;                   // RECV_B posted, waited in B
  bool grad_posted = false;
  bool holds_activations = false;
};

class StepActions {
 public:
  StepActions(Comm& comm, const StagePlacement& placement, const PipelineOptions& options, StageReplicas& replicas,
              torch::Device device)
      : comm_(comm), placement_(placement), options_(options), replicas_(replicas), device_(device) {}

  /// Runs this rank's actions on one batch (inputs on stage 0's rank, targets on the last stage's) and
  /// waits for its sends; returns the batch's loss (a [1] double) on the last stage's rank, 0 elsewhere.
  torch::Tensor run(const torch::Tensor& inputs, const torch::Tensor& targets);
  /// The most microbatches whose activations this rank held at once in the last run().
  int peak_activations() const { return peak_activations_; }

 private:
  void split_batch(const torch::Tensor& inputs, const torch::Tensor& targets);
  void run(const Action& action);
  void run_forward(int stage, int microbatch);
  void run_backward(int stage, int microbatch);
  void send_forward(int stage, int microbatch);
  void send_backward(int stage, int microbatch);
  void post_recv_forward(int stage, int microbatch);
  void post_recv_backward(int stage, int microbatch);
  torch::Tensor stage_input(int stage, int microbatch);
  torch::Tensor output_grad(int stage, int microbatch);
  torch::Tensor loss_of(int microbatch, const torch::Tensor& output);

  Comm& comm_;
  const StagePlacement& placement_;
  const PipelineOptions& options_;
  StageReplicas& replicas_;
  torch::Device device_;

  std::vector<torch::Tensor> input_chunks_, target_chunks_;
  std::vector<double> weights_;                                    // rows of microbatch m / rows of the batch
  std::map<std::pair<int, int>, Slot> slots_;                      // (stage, microbatch)
  std::map<std::tuple<int, int, int>, torch::Tensor> local_mail_;  // same-rank transfers
  std::vector<Work> sends_;
  torch::Tensor loss_sum_;
  int held_ = 0;
  int peak_activations_ = 0;
};

}  // namespace cohort::pipeline::detail
