// The actions of one step on this rank, in the schedule's order: forwards and backwards of a stage on a
// microbatch, and the sends and receives between stages (note "receive at need" in pipeline_impl.h).
// A stage that raises is named with its rank, the microbatch and the input it was given.
#include <torch/torch.h>

#include <new>
#include <optional>
#include <vector>

#include "comm/op_util.h"
#include "core/check.h"
#include "pipeline/pipeline_impl.h"

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

void PipelineImpl::run_actions() {
  for (const auto& action : schedule.actions[rank_]) run(action);
}

void PipelineImpl::run(const Action& action) {
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

void PipelineImpl::post_recv_forward(int stage, int microbatch) {
  if (stage == 0 || is_mine(stage - 1)) return;
  slots_[{stage, microbatch}].input_receive.post(*comm_, schedule.rank_of(stage - 1),
                                                 tag(stage, microbatch, Direction::kForward));
}

torch::Tensor PipelineImpl::stage_input(int stage, int microbatch) {
  if (stage == 0) return input_chunks_.at(microbatch);
  if (is_mine(stage - 1)) {
    auto it = local_mail_.find({stage, microbatch, kForwardMail});
    COHORT_CHECK_KIND(kInternal, it != local_mail_.end(), "Pipeline: schedule '", schedule.name,
                      "' runs forward of stage ", stage, " microbatch ", microbatch, " before stage ", stage - 1,
                      " sent it (rank ", rank_, ")");
    auto input = it->second;
    local_mail_.erase(it);
    return input;
  }
  auto& receive = slots_[{stage, microbatch}].input_receive;
  if (!receive.posted()) receive.post(*comm_, schedule.rank_of(stage - 1), tag(stage, microbatch, Direction::kForward));
  return receive.take(*comm_, device_);
}

torch::Tensor PipelineImpl::loss_of(int microbatch, const torch::Tensor& output) {
  // An empty microbatch (fewer rows than chunks): a zero on the graph, so that its backward runs like
  // the others' and adds nothing; a mean loss over no rows would be NaN.
  if (target_chunks_.at(microbatch).size(0) == 0) return (output.sum() * 0.0).reshape({});
  auto loss = options_.loss_fn()(output, target_chunks_.at(microbatch));
  COHORT_CHECK_KIND(kInvalidArgument, loss.defined() && loss.numel() == 1, "Pipeline: the loss function returned ",
                    describe_tensor(loss), " for microbatch ", microbatch,
                    "; it must return one number (the microbatch's mean loss)");
  return loss.reshape({});
}

void PipelineImpl::run_forward(int stage, int microbatch) {
  auto input = stage_input(stage, microbatch).detach();
  if (stage > 0 && input.is_floating_point()) input.requires_grad_(true);
  auto& slot = slots_[{stage, microbatch}];
  slot.input = input;
  torch::Tensor output;
  try {
    std::optional<torch::NoGradGuard> no_grad;
    if (options_.recompute()) no_grad.emplace();
    output = module_of(stage)->forward(input);
    if (is_last(stage)) {
      auto loss = loss_of(microbatch, output);
      loss_sum_ += loss.detach().to(torch::kDouble) * weights_.at(microbatch);
      if (!options_.recompute()) slot.loss = loss;
    }
  } catch (const std::exception& e) {
    std::string from = stage == 0 ? ""
                                  : " from stage " + std::to_string(stage - 1) + " (rank " +
                                        std::to_string(schedule.rank_of(stage - 1)) + ")";
    raise_from("stage " + std::to_string(stage) + " (rank " + std::to_string(rank_) + ") raised in forward of " +
                   "microbatch " + std::to_string(microbatch) + " on its input " + describe_tensor(input) + from +
                   ": " + cohort::detail::first_line(e.what()),
               e);
  }
  // Neighbouring stages on one rank (a single rank with looped stages) hand over without a transfer.
  if (!is_last(stage) && is_mine(stage + 1)) local_mail_[{stage + 1, microbatch, kForwardMail}] = output.detach();
  slot.output = output;  // under recompute, dropped once sent
  slot.output_sizes = output.sizes().vec();
  slot.output_options = output.options();
  slot.holds_activations = true;
  peak_activations = std::max(peak_activations, ++held_);
}

void PipelineImpl::send_forward(int stage, int microbatch) {
  auto& slot = slots_.at({stage, microbatch});
  COHORT_CHECK_KIND(kInternal, slot.output.defined(), "Pipeline: schedule '", schedule.name, "' sends stage ", stage,
                    " microbatch ", microbatch, "'s output before its forward (rank ", rank_, ")");
  if (!is_mine(stage + 1))
    send_activation(*comm_, slot.output.detach(), schedule.rank_of(stage + 1),
                    tag(stage + 1, microbatch, Direction::kForward), sends_);
  if (options_.recompute()) slot.output = torch::Tensor();
}

void PipelineImpl::post_recv_backward(int stage, int microbatch) {
  if (is_last(stage) || is_mine(stage + 1)) return;
  auto& slot = slots_[{stage, microbatch}];
  if (slot.grad_posted || !slot.holds_activations) return;  // before its forward: posted when needed
  slot.grad_buffer = torch::empty(slot.output_sizes, slot.output_options);
  slot.grad_work = comm_->irecv(slot.grad_buffer, schedule.rank_of(stage + 1),
                                tag(stage, microbatch, Direction::kBackward));
  slot.grad_posted = true;
}

torch::Tensor PipelineImpl::output_grad(int stage, int microbatch) {
  if (is_mine(stage + 1)) {
    auto it = local_mail_.find({stage, microbatch, kBackwardMail});
    COHORT_CHECK_KIND(kInternal, it != local_mail_.end(), "Pipeline: schedule '", schedule.name,
                      "' runs backward of stage ", stage, " microbatch ", microbatch, " before stage ", stage + 1,
                      " sent its gradient (rank ", rank_, ")");
    auto grad = it->second;
    local_mail_.erase(it);
    return grad;
  }
  auto& slot = slots_.at({stage, microbatch});
  if (!slot.grad_posted) post_recv_backward(stage, microbatch);
  slot.grad_work.wait();
  return slot.grad_buffer;
}

void PipelineImpl::run_backward(int stage, int microbatch) {
  auto it = slots_.find({stage, microbatch});
  COHORT_CHECK_KIND(kInternal, it != slots_.end() && it->second.holds_activations, "Pipeline: schedule '",
                    schedule.name, "' runs backward of stage ", stage, " microbatch ", microbatch,
                    " before its forward (rank ", rank_, ")");
  auto& slot = it->second;
  const auto grad = is_last(stage) ? torch::Tensor() : output_grad(stage, microbatch);
  const int local = local_index(stage);
  std::optional<DataParallelCore::NoSyncGuard> no_sync;
  if (!ddp_.empty() && microbatch != last_backward_[local]) no_sync.emplace(ddp_[local]->no_sync());
  try {
    auto output = slot.output, loss = slot.loss;
    if (options_.recompute()) {
      output = module_of(stage)->forward(slot.input);
      if (is_last(stage)) loss = loss_of(microbatch, output);
    }
    // A stage without trainable parameters on an input without gradient (a Flatten first) has no graph.
    if (is_last(stage) && loss.requires_grad()) backward_of(local, microbatch, loss * weights_.at(microbatch), {});
    else if (!is_last(stage) && output.requires_grad()) backward_of(local, microbatch, output, grad);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    raise_from("stage " + std::to_string(stage) + " (rank " + std::to_string(rank_) + ") raised in backward of " +
                   "microbatch " + std::to_string(microbatch) + ": " + cohort::detail::first_line(e.what()),
               e);
  }
  if (stage > 0) {
    auto input_grad = slot.input.grad();
    slot.input_grad = input_grad.defined() ? input_grad : torch::zeros_like(slot.input);
    if (is_mine(stage - 1)) local_mail_[{stage - 1, microbatch, kBackwardMail}] = slot.input_grad;
  }
  slot.input = slot.output = slot.loss = slot.grad_buffer = torch::Tensor();
  slot.holds_activations = false;
  --held_;
}

void PipelineImpl::send_backward(int stage, int microbatch) {
  auto it = slots_.find({stage, microbatch});
  COHORT_CHECK_KIND(kInternal, it != slots_.end() && it->second.input_grad.defined(), "Pipeline: schedule '",
                    schedule.name, "' sends stage ", stage, " microbatch ", microbatch,
                    "'s input gradient before its backward (rank ", rank_, ")");
  if (!is_mine(stage - 1))
    sends_.push_back(comm_->isend(it->second.input_grad.contiguous(), schedule.rank_of(stage - 1),
                                  tag(stage - 1, microbatch, Direction::kBackward)));
  slots_.erase(it);
}

}  // namespace cohort::pipeline::detail
