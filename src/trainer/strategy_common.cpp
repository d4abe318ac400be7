// The pieces every Trainer strategy shares (see strategy.h): ModuleOptimizerStrategy's optimizer step,
// accumulation and clipping (ddp, single, dp, pipeline), the module's model as a shared_ptr, its
// trainable parameters and their float32 copies, and the optimizer's name.
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "cohort/error.h"
#include "compat/optimizer_state.h"
#include "core/check.h"
#include "trainer/strategy.h"

namespace cohort::detail {

void ModuleOptimizerStrategy::make_optimizer(TrainingModule& module, std::vector<torch::Tensor> parameters) {
  parameters_ = std::move(parameters);
  optimizer_ = module.configure_optimizers(parameters_);
  COHORT_CHECK_KIND(kInvalidArgument, optimizer_ != nullptr, "configure_optimizers returned no optimizer");
}

torch::Tensor ModuleOptimizerStrategy::per_micro_batch(const torch::Tensor& loss) const {
  const int64_t accumulate = options_.raw.accumulate_grad_batches();
  // Dividing by 1 is exact, but skipping it keeps the graph the same as a hand-written loop's.
  return accumulate > 1 ? loss / static_cast<double>(accumulate) : loss;
}

void ModuleOptimizerStrategy::clip_gradients(double max_norm) {
  torch::nn::utils::clip_grad_norm_(parameters_, max_norm);
}

void ModuleOptimizerStrategy::step() {
  if (options_.raw.gradient_clip_val() > 0) clip_gradients(options_.raw.gradient_clip_val());
  optimizer_->step();
  optimizer_->zero_grad();
  after_step();
}

MemoryReport ModuleOptimizerStrategy::memory_report() const {
  MemoryReport report;
  for (const auto& p : parameters_) {
    report.num_parameters += p.numel();
    report.parameter_bytes += static_cast<int64_t>(p.nbytes());
    if (p.grad().defined()) report.gradient_bytes += static_cast<int64_t>(p.grad().nbytes());
    torch::optim::OptimizerParamState* state = find_param_state(*optimizer_, p);
    if (state == nullptr) continue;
    for (const auto& [field, tensor] : state_fields(*state, "Trainer::memory_report"))
      if (tensor.defined()) report.optimizer_bytes += static_cast<int64_t>(tensor.nbytes());
  }
  return report;
}

std::shared_ptr<torch::nn::Module> model_pointer(TrainingModule& module) {
  if (module.has_network()) return module.network().ptr();
  return std::shared_ptr<torch::nn::Module>(&module, [](torch::nn::Module*) {});
}

std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& parameter : module.parameters())
    if (parameter.requires_grad()) out.push_back(parameter);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> float_parameters(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : module.named_parameters())
    out.emplace_back(item.key(), item.value().detach().to(torch::kCPU, torch::kFloat).contiguous());
  return out;
}

std::string optimizer_name(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return "AdamW";
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return "Adam";
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return "SGD";
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer)) return "RMSprop";
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer)) return "Adagrad";
  if (dynamic_cast<const torch::optim::LBFGS*>(&optimizer)) return "LBFGS";
  return "Optimizer";
}

}  // namespace cohort::detail
