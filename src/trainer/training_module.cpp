// TrainingModule (see cohort/training_module.h): forward() and log() go to the Trainer running it.
#include "cohort/training_module.h"

#include "cohort/error.h"
#include "core/check.h"

namespace cohort {

TrainingModule::TrainingModule() = default;

TrainingModule::TrainingModule(torch::nn::Sequential network)
    : network_(register_module("network", std::move(network))) {}

// The derived parts are gone, but the layers and parameters still live in torch::nn::Module's
// registry: the Trainer's strategy (DDP hooks, the ZeRO engine) can be taken down safely now.
TrainingModule::~TrainingModule() {
  if (link_ != nullptr) link_->detach_module();
}

torch::nn::Sequential& TrainingModule::network() {
  COHORT_CHECK_KIND(kInvalidArgument, has_network(),
                    "TrainingModule::network(): this module has its own layers (made with "
                    "TrainingModule()), not a torch::nn::Sequential network");
  return network_;
}

torch::nn::Module& TrainingModule::model() {
  return has_network() ? static_cast<torch::nn::Module&>(*network_) : *this;
}

void TrainingModule::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  COHORT_CHECK_KIND(kInvalidArgument, value.numel() == 1, "log(\"", name,
                    "\"): a metric is one number, got a tensor of shape ", value.sizes());
  if (link_ != nullptr) link_->log(name, value, options);
}

void TrainingModule::log(const std::string& name, double value, const LogOptions& options) {
  log(name, torch::tensor(value, torch::kFloat64), options);
}

torch::Tensor TrainingModule::forward(const torch::Tensor& input) {
  if (!has_network() && link_ != nullptr && link_->runs_pipeline_layers()) return link_->forward(input);
  COHORT_CHECK_KIND(kInvalidArgument, has_network(),
                    "TrainingModule::forward: this module has its own layers (made with TrainingModule()): "
                    "override forward, or define one with your inputs, and call it from training_step");
  return link_ != nullptr ? link_->forward(input) : network_->forward(input);
}

torch::Tensor TrainingModule::loss(const torch::Tensor&, const torch::Tensor&) {
  throw Error(
      "strategy \"pipeline\" computes each microbatch's loss on the last stage: override "
      "TrainingModule::loss(output, target), e.g. return torch::nn::functional::cross_entropy(output, target)",
      ErrorKind::kInvalidArgument);
}

const Mesh& TrainingModule::device_mesh() const {
  const Mesh* mesh = link_ != nullptr ? link_->device_mesh() : nullptr;
  COHORT_CHECK_KIND(kInvalidArgument, mesh != nullptr, "TrainingModule::device_mesh: ",
                    link_ == nullptr ? "the module is not run by a Trainer yet (ask from configure_model on)"
                                     : "the Trainer has no mesh: set TrainerOptions.tensor_parallel_size above 1");
  return *mesh;
}

int64_t TrainingModule::current_epoch() const { return link_ != nullptr ? link_->current_epoch() : 0; }
int64_t TrainingModule::global_step() const { return link_ != nullptr ? link_->global_step() : 0; }

}  // namespace cohort
