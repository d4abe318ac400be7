// The actions of one step on this rank, in the schedule's order: forwards and backwards of a stage on a
// microbatch, and the sends and receives between stages (note "receive at need" in step_actions.h).
// A stage that raises is named with its rank, the microbatch and the input it was given.
#include <torch/torch.h>

#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "comm/op_util.h"
#include "core/check.h"
#include "pipeline/step_actions.h"

namespace cohort::pipeline::detail {
namespace {

constexpr int kForwardMail = 0;
constexpr int kBackwardMail = 1;

// Raises `message` for what a stage raised: a cohort::Error keeps its kind and ranks, running out of
// memory is kOutOfMemory, anything else (the stage's own code failed) is of no kind known here.
[[noreturn]] void raise_from(const std::string& message, const std::exception& e) {
  ErrorKind kind = ErrorKind::kOther;
  std::vector<int> ranks;
  if (const auto* error = dynamic_cast<const Error*>(&e)) {
    kind = error->kind();
    ranks = error->ranks();
  } else if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr ||
             dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    kind = ErrorKind::kOutOfMemory;
  }
  const Error raised(message, kind, ranks);
  throw raised;
}

}  // namespace

torch::Tensor StepActions::run(const torch::Tensor& inputs, const torch::Tensor& targets) {
  split_batch(inputs, targets);
  slots_.clear();
  local_mail_.clear();
  sends_.clear();
  held_ = 0;
  peak_activations_ = 0;
  loss_sum_ = torch::zeros({1}, torch::kDouble);
  for (const auto& action : placement_.schedule().actions[placement_.rank()]) run(action);
  for (auto& send : sends_) send.wait();
  sends_.clear();
  slots_.clear();
  return loss_sum_;
}

void StepActions::split_batch(const torch::Tensor& inputs, const torch::Tensor& targets) {
  const int chunks = placement_.schedule().microbatches;
  const bool first = placement_.is_mine(0), last = placement_.is_mine(placement_.schedule().stages - 1);
  COHORT_CHECK_KIND(kInvalidArgument, !first || inputs.defined(), "Pipeline::step: inputs are undefined on rank ",
                    placement_.rank(), ", which runs stage 0");
  COHORT_CHECK_KIND(kInvalidArgument, !last || targets.defined(), "Pipeline::step: targets are undefined on rank ",
                    placement_.rank(), ", which runs the last stage (", placement_.schedule().stages - 1, ")");
  input_chunks_.clear();
  target_chunks_.clear();
  weights_.clear();
  if (first) input_chunks_ = torch::tensor_split(inputs, chunks, 0);
  if (!last) return;
  const int64_t rows = targets.size(0);
  COHORT_CHECK_KIND(kInvalidArgument, !first || inputs.size(0) == rows, "Pipeline::step: inputs have ", inputs.size(0),
                    " rows but targets ", rows);
  COHORT_CHECK_KIND(kInvalidArgument, rows >= 1, "Pipeline::step: a batch of 0 rows: give at least one row");
  // Uneven chunks differ by one row at most; with fewer rows than chunks (an epoch's short last
  // batch) the last microbatches are empty: they run through every stage with weight 0 (loss_of).
  target_chunks_ = torch::tensor_split(targets, chunks, 0);
  for (const auto& chunk : target_chunks_) weights_.push_back(double(chunk.size(0)) / double(rows));
}

void StepActions::run(const Action& action) {
  const int s = action.stage, m = action.microbatch;
  switch (action.kind) {
    case ActionKind::kForward: return run_forward(s, m);
    case ActionKind::kBackward: return run_backward(s, m);
    case ActionKind::kSendForward: return send_forward(s, m);
    case ActionKind::kSendBackward: return send_backward(s, m);
    case ActionKind::kRecvForward: return post_recv_forward(s, m);
    case ActionKind::kRecvBackward: return post_recv_backward(s, m);
  }
}

void StepActions::post_recv_forward(int stage, int microbatch) {
  if (stage == 0 || placement_.is_mine(stage - 1)) return;
  slots_[{stage, microbatch}].input_receive.post(comm_, placement_.rank_of(stage - 1),
                                                 placement_.tag(stage, microbatch, Direction::kForward));
}

torch::Tensor StepActions::stage_input(int stage, int microbatch) {
  if (stage == 0) return input_chunks_.at(microbatch);
  if (placement_.is_mine(stage - 1)) {
    auto it = local_mail_.find({stage, microbatch, kForwardMail});
    COHORT_CHECK_KIND(kInternal, it != local_mail_.end(), "Pipeline: schedule '", placement_.schedule().name,
                      "' runs forward of stage ", stage, " microbatch ", microbatch, " before stage ", stage - 1,
                      " sent it (rank ", placement_.rank(), ")");
    auto input = it->second;
    local_mail_.erase(it);
    return input;
  }
  auto& receive = slots_[{stage, microbatch}].input_receive;
  if (!receive.posted())
    receive.post(comm_, placement_.rank_of(stage - 1), placement_.tag(stage, microbatch, Direction::kForward));
  return receive.take(comm_, device_);
}

torch::Tensor StepActions::loss_of(int microbatch, const torch::Tensor& output) {
  // An empty microbatch (fewer rows than chunks): a zero on the graph, so that its backward runs like
  // the others' and adds nothing; a mean loss over no rows would be NaN.
  if (target_chunks_.at(microbatch).size(0) == 0) return (output.sum() * 0.0).reshape({});
  auto loss = options_.loss_fn()(in_float(output), target_chunks_.at(microbatch));
  COHORT_CHECK_KIND(kInvalidArgument, loss.defined() && loss.numel() == 1, "Pipeline: the loss function returned ",
                    describe_tensor(loss), " for microbatch ", microbatch,
                    "; it must return one number (the microbatch's mean loss)");
  return loss.reshape({});
}

void StepActions::run_forward(int stage, int microbatch) {
  // Stage 0's floating-point inputs in the stages' compute dtype (bf16 under a bf16 ZeRO config).
  auto input = replicas_.to_compute(placement_.local_index(stage), stage_input(stage, microbatch)).detach();
  if (stage > 0 && input.is_floating_point()) input.requires_grad_(true);
  auto& slot = slots_[{stage, microbatch}];
  slot.input = input;
  torch::Tensor output;
  try {
    std::optional<torch::NoGradGuard> no_grad;
    if (options_.recompute()) no_grad.emplace();
    output = replicas_.forward(placement_.local_index(stage),
                               [&] { return placement_.module_of(stage)->forward(input); });
    if (placement_.is_last(stage)) {
      auto loss = loss_of(microbatch, output);
      loss_sum_ += loss.detach().to(torch::kDouble) * weights_.at(microbatch);
      if (!options_.recompute()) slot.loss = loss;
    }
  } catch (const std::exception& e) {
    std::string from = stage == 0 ? ""
                                  : " from stage " + std::to_string(stage - 1) + " (rank " +
                                        std::to_string(placement_.rank_of(stage - 1)) + ")";
    raise_from("stage " + std::to_string(stage) + " (rank " + std::to_string(placement_.rank()) +
                   ") raised in forward of " + "microbatch " + std::to_string(microbatch) + " on its input " +
                   describe_tensor(input) + from + ": " + cohort::detail::first_line(e.what()),
               e);
  }
  // Neighbouring stages on one rank (a single rank with looped stages) hand over without a transfer.
  if (!placement_.is_last(stage) && placement_.is_mine(stage + 1))
    local_mail_[{stage + 1, microbatch, kForwardMail}] = output.detach();
  slot.output = output;  // under recompute, dropped once sent
  slot.output_sizes = output.sizes().vec();
  slot.output_options = output.options();
  slot.holds_activations = true;
  peak_activations_ = std::max(peak_activations_, ++held_);
}

void StepActions::send_forward(int stage, int microbatch) {
  auto& slot = slots_.at({stage, microbatch});
  COHORT_CHECK_KIND(kInternal, slot.output.defined(), "Pipeline: schedule '", placement_.schedule().name,
                    "' sends stage ", stage, " microbatch ", microbatch, "'s output before its forward (rank ",
                    placement_.rank(), ")");
  if (!placement_.is_mine(stage + 1))
    send_activation(comm_, slot.output.detach(), placement_.rank_of(stage + 1),
                    placement_.tag(stage + 1, microbatch, Direction::kForward), sends_);
  if (options_.recompute()) slot.output = torch::Tensor();
}

void StepActions::post_recv_backward(int stage, int microbatch) {
  if (placement_.is_last(stage) || placement_.is_mine(stage + 1)) return;
  auto& slot = slots_[{stage, microbatch}];
  if (slot.grad_posted || !slot.holds_activations) return;  // before its forward: posted when needed
  slot.grad_buffer = torch::empty(slot.output_sizes, slot.output_options);
  slot.grad_work = comm_.irecv(slot.grad_buffer, placement_.rank_of(stage + 1),
                               placement_.tag(stage, microbatch, Direction::kBackward));
  slot.grad_posted = true;
}

torch::Tensor StepActions::output_grad(int stage, int microbatch) {
  if (placement_.is_mine(stage + 1)) {
    auto it = local_mail_.find({stage, microbatch, kBackwardMail});
    COHORT_CHECK_KIND(kInternal, it != local_mail_.end(), "Pipeline: schedule '", placement_.schedule().name,
                      "' runs backward of stage ", stage, " microbatch ", microbatch, " before stage ", stage + 1,
                      " sent its gradient (rank ", placement_.rank(), ")");
    auto grad = it->second;
    local_mail_.erase(it);
    return grad;
  }
  auto& slot = slots_.at({stage, microbatch});
  if (!slot.grad_posted) post_recv_backward(stage, microbatch);
  slot.grad_work.wait();
  return slot.grad_buffer;
}

void StepActions::run_backward(int stage, int microbatch) {
  auto it = slots_.find({stage, microbatch});
  COHORT_CHECK_KIND(kInternal, it != slots_.end() && it->second.holds_activations, "Pipeline: schedule '",
                    placement_.schedule().name, "' runs backward of stage ", stage, " microbatch ", microbatch,
                    " before its forward (rank ", placement_.rank(), ")");
  auto& slot = it->second;
  const auto grad = placement_.is_last(stage) ? torch::Tensor() : output_grad(stage, microbatch);
  const int local = placement_.local_index(stage);
  try {
    auto output = slot.output, loss = slot.loss;
    if (options_.recompute()) {
      output = placement_.module_of(stage)->forward(slot.input);
      if (placement_.is_last(stage)) loss = loss_of(microbatch, output);
    }
    // A stage without trainable parameters on an input without gradient (a Flatten first) has no graph.
    if (placement_.is_last(stage) && loss.requires_grad())
      replicas_.backward(local, microbatch, loss * weights_.at(microbatch), {});
    else if (!placement_.is_last(stage) && output.requires_grad()) replicas_.backward(local, microbatch, output, grad);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    raise_from("stage " + std::to_string(stage) + " (rank " + std::to_string(placement_.rank()) +
                   ") raised in backward of " + "microbatch " + std::to_string(microbatch) + ": " +
                   cohort::detail::first_line(e.what()),
               e);
  }
  if (stage > 0) {
    auto input_grad = slot.input.grad();
    slot.input_grad = input_grad.defined() ? input_grad : torch::zeros_like(slot.input);
    if (placement_.is_mine(stage - 1)) local_mail_[{stage - 1, microbatch, kBackwardMail}] = slot.input_grad;
  }
  slot.input = slot.output = slot.loss = slot.grad_buffer = torch::Tensor();
  slot.holds_activations = false;
  --held_;
}

void StepActions::send_backward(int stage, int microbatch) {
  auto it = slots_.find({stage, microbatch});
  COHORT_CHECK_KIND(kInternal, it != slots_.end() && it->second.input_grad.defined(), "Pipeline: schedule '",
                    placement_.schedule().name, "' sends stage ", stage, " microbatch ", microbatch,
                    "'s input gradient before its backward (rank ", placement_.rank(), ")");
  if (!placement_.is_mine(stage - 1))
    sends_.push_back(comm_.isend(it->second.input_grad.contiguous(), placement_.rank_of(stage - 1),
                                 placement_.tag(stage - 1, microbatch, Direction::kBackward)));
  slots_.erase(it);
}

}  // namespace cohort::pipeline::detail
