// Pipeline: construction (stages checked against the schedule, DDP or ZeRO per stage over the data group:
// stage_replicas.cpp), one training step around its actions (step_actions.cpp), inference, and the
// public facade.
#include <torch/torch.h>

#include "comm/op_util.h"
#include "core/check.h"
#include "pipeline/pipeline_impl.h"
#include "pipeline/step_actions.h"

namespace cohort::pipeline {
namespace detail {

PipelineImpl::PipelineImpl(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages_in,
                           Schedule schedule_in, PipelineOptions options)
    : stages(std::move(stages_in)),
      schedule(std::move(schedule_in)),
      comm_(std::move(comm)),
      rank_(comm_ ? comm_->rank() : 0),
      options_(std::move(options)) {
  COHORT_CHECK_KIND(kInvalidArgument, comm_, "Pipeline: the Comm is null");
  COHORT_CHECK_KIND(kInvalidArgument, options_.loss_fn(),
                    "Pipeline: PipelineOptions::loss_fn is not set (the last stage's loss, e.g. "
                    "torch::nn::functional::cross_entropy)");
  COHORT_CHECK_KIND(kInvalidArgument, schedule.ranks == comm_->size(), "Pipeline: schedule '", schedule.name,
                    "' is for ", schedule.ranks, " ranks but the Comm has ", comm_->size());
  validate(schedule);
  for (int s = rank_; s < schedule.stages; s += schedule.ranks) stage_ids.push_back(s);
  check_stages();
  for (const auto& stage : stages) {
    for (const auto& p : stage->parameters()) {
      device_ = p.device();
      break;
    }
  }
  std::vector<int> last_backward(stages.size(), -1);
  for (const auto& action : schedule.actions[rank_])
    if (action.kind == ActionKind::kBackward) last_backward[placement_.local_index(action.stage)] = action.microbatch;
  auto cut = gather_stage_cut(*comm_, schedule, stages);
  layer_bounds = std::move(cut.bounds);
  names_whole_model = cut.names_whole_model || options_.parameter_names() != nullptr;
  trainable_params = cut.trainable_params;
  if (options_.parameter_names()) {
    // Before the engines take the parameters: tied copies start as the first stage's.
    tied = std::make_unique<TiedParameters>(comm_, stage_ids, stages, options_.parameter_names());
    const int zero_stage = options_.zero() ? options_.zero()->zero_optimization().stage() : 0;
    COHORT_CHECK_KIND(kInvalidArgument, tied->first_name().empty() || zero_stage == 0 || zero_stage == 3,
                      "Pipeline: parameter '", tied->first_name(),
                      "' is tied across stages (PipelineOptions::parameter_names), and ZeRO stage ", zero_stage,
                      " groups each stage's gradients by reduce_bucket_size, so the two copies' shards do not line "
                      "up: use stage 3 (each holder a unit of its own) or DDP");
    tied->synchronize();
    trainable_params = tied->distinct();
  }
  replicas = std::make_unique<StageReplicas>(stages, options_, std::move(last_backward));
  // Every holder checks at once; the stages between them are not left waiting on a failure.
  if (tied && replicas->has_zero()) failing_on_every_rank("Pipeline", [&] { tied->check_engines(*replicas); });
}

void PipelineImpl::check_stages() const {
  std::string ids;
  for (int s : stage_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(s);
  COHORT_CHECK_KIND(kInvalidArgument, stages.size() == stage_ids.size(), "Pipeline: rank ", rank_, " was given ",
                    stages.size(), " stage module(s) but schedule '", schedule.name, "' (", schedule.stages,
                    " stages on ", schedule.ranks, " ranks) places stage(s) ", ids,
                    " here (stages_of_rank gives them)");
  for (size_t i = 0; i < stages.size(); ++i)
    COHORT_CHECK_KIND(kInvalidArgument, !stages[i].is_empty(), "Pipeline: stage ", stage_ids[i], " on rank ", rank_,
                      " is a null module");
}

torch::Tensor PipelineImpl::step(const torch::Tensor& inputs, const torch::Tensor& targets) {
  torch::Tensor loss;
  failing_on_every_rank("Pipeline::step", [&] {
    if (tied && !replicas->has_zero()) tied->check_fresh_gradients();
    StepActions actions(*comm_, placement_, options_, *replicas, device_);
    const auto loss_sum = actions.run(inputs, targets);
    peak_activations = actions.peak_activations();
    if (tied && !replicas->has_zero()) tied->sum_gradients();  // under ZeRO: optimizer_step's
    loss = broadcast_loss(loss_sum);
  });
  return loss;
}

void PipelineImpl::optimizer_step() {
  failing_on_every_rank("Pipeline::optimizer_step", [&] {
    if (tied) tied->sum_engine_gradients(*replicas);
    replicas->step_zero();
  });
}

void PipelineImpl::failing_on_every_rank(const char* what, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    fail(e.what(), e.kind(), e.ranks());  // a peer's death stays a peer's death for the caller
  } catch (const std::exception& e) {
    fail(std::string(what) + " on rank " + std::to_string(rank_) + " failed: " + cohort::detail::first_line(e.what()),
         ErrorKind::kOther);  // not cohort's: its kind is not known here
  }
}

torch::Tensor PipelineImpl::broadcast_loss(const torch::Tensor& loss_sum) {
  const int root = schedule.rank_of(schedule.stages - 1);
  auto loss = rank_ == root ? loss_sum : torch::zeros({1}, torch::kDouble);
  comm_->broadcast(loss, root);
  return loss.squeeze(0);
}

torch::Tensor PipelineImpl::forward(const torch::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  torch::Tensor x;
  std::vector<Work> sends;
  for (int s : stage_ids) {
    if (s == 0) {
      COHORT_CHECK_KIND(kInvalidArgument, inputs.defined(), "Pipeline::forward: inputs are undefined on rank ", rank_,
                        ", which runs stage 0");
      x = inputs;
    } else if (!placement_.is_mine(s - 1)) {
      ActivationReceive receive;
      receive.post(*comm_, schedule.rank_of(s - 1), placement_.tag(s, 0, Direction::kForward));
      x = receive.take(*comm_, device_);
    }
    const int local = placement_.local_index(s);
    x = replicas->to_compute(local, x);
    x = replicas->forward(local, [&] { return placement_.module_of(s)->forward(x); });
    if (placement_.is_last(s)) x = in_float(x);
    if (!placement_.is_last(s) && !placement_.is_mine(s + 1))
      send_activation(*comm_, x, schedule.rank_of(s + 1), placement_.tag(s + 1, 0, Direction::kForward), sends);
  }
  for (auto& send : sends) send.wait();
  // The last stage's rank announces the output's dtype and shape, then broadcasts it.
  const int root = schedule.rank_of(schedule.stages - 1);
  auto header = rank_ == root ? encode_header(x) : encode_header(torch::zeros({0}));
  comm_->broadcast(header, root);
  if (rank_ != root) x = empty_from_header(header, device_);
  return comm_->broadcast(x.contiguous(), root);
}

void PipelineImpl::check_whole_model_names(const char* what) const {
  COHORT_CHECK_KIND(kInvalidArgument, names_whole_model, "Pipeline::", what,
                    ": the stages' layers are not named by their place in the "
                    "whole model (stage s must hold layers \"b[s]\", \"b[s]+1\", ... as partition() and "
                    "stages_of_rank() give them), so checkpoints could not name parameters as the whole model");
}

void PipelineImpl::check_checkpointable(const char* what) const {
  check_whole_model_names(what);
  COHORT_CHECK_KIND(kInvalidArgument, !options_.zero(), "Pipeline::", what,
                    ": a pipeline with ZeRO over the data group (PipelineOptions::zero) keeps its weights and "
                    "optimizer state in each stage's ZeRO engine: add Pipeline::zero_state() instead");
}

void PipelineImpl::fail(const std::string& message, ErrorKind kind, const std::vector<int>& ranks) {
  comm_->abort(message);
  if (options_.data_comm()) options_.data_comm()->abort(message);
  if (tied) tied->abort(message);
  const Error error(message, kind, ranks);
  throw error;
}

}  // namespace detail

Pipeline::Pipeline(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages, PipelineOptions options)
    : Pipeline(comm, std::move(stages),
               make_schedule(options.schedule(), comm ? comm->size() : 1, options.chunks(), options.stages_per_rank()),
               options) {}

Pipeline::Pipeline(std::shared_ptr<Comm> comm, std::vector<torch::nn::Sequential> stages, Schedule schedule,
                   PipelineOptions options)
    : impl_(std::make_unique<detail::PipelineImpl>(std::move(comm), std::move(stages), std::move(schedule),
                                                   std::move(options))) {}

Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;

torch::Tensor Pipeline::step(const torch::Tensor& inputs, const torch::Tensor& targets) {
  return impl_->step(inputs, targets);
}
torch::Tensor Pipeline::forward(const torch::Tensor& inputs) { return impl_->forward(inputs); }
const std::vector<int>& Pipeline::stage_ids() const { return impl_->stage_ids; }
const std::vector<torch::nn::Sequential>& Pipeline::stages() const { return impl_->stages; }
const Schedule& Pipeline::schedule() const { return impl_->schedule; }
int Pipeline::peak_activations() const { return impl_->peak_activations; }

std::vector<std::pair<std::string, torch::Tensor>> Pipeline::full_parameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t local = 0; local < impl_->stages.size(); ++local) {
    auto whole = impl_->replicas->has_zero() ? impl_->replicas->full_parameters(int(local))
                                             : std::vector<std::pair<std::string, torch::Tensor>>{};
    if (!impl_->replicas->has_zero())
      for (const auto& item : impl_->stages[local]->named_parameters(true))
        whole.emplace_back(item.key(), item.value().detach().clone());
    for (auto& [name, value] : whole) out.emplace_back(impl_->whole_name(name), std::move(value));
  }
  return out;
}

std::vector<torch::Tensor> Pipeline::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& stage : impl_->stages)
    for (const auto& p : stage->parameters())
      if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace cohort::pipeline
