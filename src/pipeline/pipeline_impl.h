// PipelineImpl: what a Pipeline holds and how one step runs. The constructor checks the stages against
// the schedule and wraps them in DDP when there is a data group; step() splits the batch, runs this
// rank's actions in the schedule's order (actions.cpp) and returns the broadcast mean loss.
//
// Note "receive at need": sends never wait (cohort's isend posts and returns), and a receive is posted
// at its RECV action but waited for only when the forward or backward that needs it runs, which is the
// order the schedule's validate() proves free of waiting cycles.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "cohort/pipeline.h"
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

class PipelineImpl {
 public:
  PipelineImpl(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages, Schedule schedule,
               PipelineOptions options);

  torch::Tensor step(const torch::Tensor& inputs, const torch::Tensor& targets);
  torch::Tensor forward(const torch::Tensor& inputs);

  std::vector<int> stage_ids;
  std::vector<torch::nn::Sequential> stages;
  Schedule schedule;
  int peak_activations = 0;
  std::vector<int64_t> layer_bounds;                  // the whole cut: stages + 1 layer indices (note "layer ranges")
  bool names_whole_model = true;                      // the stages' layers are named by their place in the whole model
  std::vector<std::unique_ptr<ZeroEngineCore>> zero;  // per local stage, with PipelineOptions::zero

  /// Throws naming `what` when checkpoints cannot name this pipeline's tensors as the whole model.
  void check_checkpointable(const char* what) const;

 private:
  void check_stages() const;
  void gather_layer_ranges();
  void make_zero_engines();
  /// The backward of one microbatch: through its stage's ZeRO engine (which then reduces) for the
  /// stage's last microbatch under PipelineOptions::zero, else plain autograd.
  void backward_of(int local, int microbatch, const torch::Tensor& root, const torch::Tensor& grad);
  void split_batch(const torch::Tensor& inputs, const torch::Tensor& targets);
  void run_actions();
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
  torch::Tensor broadcast_loss();
  /// Tells every peer (and the data group) that this rank failed, then throws `message` with the kind
  /// and ranks of the error behind it.
  [[noreturn]] void fail(const std::string& message, ErrorKind kind = ErrorKind::kOther,
                         const std::vector<int>& ranks = {});

  torch::nn::Sequential module_of(int stage) const;  // a holder: forward() is not const
  int local_index(int stage) const;
  bool is_last(int stage) const { return stage == schedule.stages - 1; }
  bool is_mine(int stage) const { return schedule.rank_of(stage) == rank_; }
  int tag(int stage, int microbatch, Direction direction) const {
    return channel(stage, microbatch, schedule.microbatches, direction);
  }

  std::shared_ptr<Comm> comm_;
  int rank_ = 0;
  PipelineOptions options_;
  std::vector<std::unique_ptr<DataParallelCore>> ddp_;  // per local stage, with a data group
  std::vector<int> last_backward_;                      // per local stage: its last backward's microbatch
  torch::Device device_{torch::kCPU};

  // One step's state.
  std::vector<torch::Tensor> input_chunks_, target_chunks_;
  std::vector<double> weights_;                                    // rows of microbatch m / rows of the batch
  std::map<std::pair<int, int>, Slot> slots_;                      // (stage, microbatch)
  std::map<std::tuple<int, int, int>, torch::Tensor> local_mail_;  // same-rank transfers
  std::vector<Work> sends_;
  torch::Tensor loss_sum_;
  int held_ = 0;
};

/// "2 stages (layers 0-5 | 6-10)".
std::string describe_bounds(const std::vector<int64_t>& bounds);

}  // namespace cohort::pipeline::detail
