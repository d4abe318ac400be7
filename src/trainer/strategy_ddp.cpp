// "ddp" and "single": the module's network as it is (under cohort::DistributedDataParallel for ddp,
// which averages gradients over ranks while backward runs) and the optimizer configure_optimizers
// returns over its trainable parameters. Accumulation keeps DDP's reduction for the boundary
// micro-batch (no_sync before it), as Lightning does.
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <optional>

#include "cohort/ddp.h"
#include "cohort/error.h"
#include "trainer/strategy.h"

namespace cohort::detail {
namespace {

class DdpStrategy : public Strategy {
 public:
  DdpStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : options_(options), module_(module), world_(world), parameters_(trainable_parameters(*module.network())) {
    if (options.strategy == StrategyKind::kDdp) core_.emplace(module.network().ptr(), DDPOptions());
    optimizer_ = module.configure_optimizers(parameters_);
    COHORT_CHECK(optimizer_ != nullptr, "configure_optimizers returned no optimizer");
  }

  torch::Tensor forward(const torch::Tensor& input) override { return module_.network()->forward(input); }

  void backward(const torch::Tensor& loss, bool boundary) override {
    const int64_t accumulate = options_.raw.accumulate_grad_batches();
    // Dividing by 1 is exact, but skipping it keeps the graph the same as a hand-written loop's.
    const torch::Tensor scaled = accumulate > 1 ? loss / static_cast<double>(accumulate) : loss;
    if (core_ && !boundary) {
      auto guard = core_->no_sync();
      scaled.backward();
    } else {
      scaled.backward();
    }
  }

  void step() override {
    if (options_.raw.gradient_clip_val() > 0)
      torch::nn::utils::clip_grad_norm_(parameters_, options_.raw.gradient_clip_val());
    optimizer_->step();
    optimizer_->zero_grad();
  }

  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  int64_t accumulation() const override { return options_.raw.accumulate_grad_batches(); }
  double lr() const override { return optimizer_->param_groups().at(0).options().get_lr(); }
  void add_to(CheckpointState& state) override {
    state.add("model", *module_.network()).add("optimizer", *optimizer_);
  }
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : module_.network()->named_parameters())
      out.emplace_back(item.key(), item.value().detach().to(torch::kCPU, torch::kFloat).contiguous());
    return out;
  }
  std::string describe() const override {
    if (!core_) return "single device";
    return "ddp (" + std::to_string(world_.size()) + " rank(s))";
  }
  std::unique_ptr<AutocastGuard> autocast() const override {
    if (options_.precision != Precision::kBf16Mixed) return nullptr;
    return std::make_unique<AutocastGuard>(world_.device().type(), torch::kBFloat16);
  }

 private:
  ResolvedOptions options_;
  TrainingModule& module_;
  World world_;
  std::vector<torch::Tensor> parameters_;
  std::optional<DataParallelCore> core_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(const ResolvedOptions& options, TrainingModule& module,
                                            const World& world) {
  return std::make_unique<DdpStrategy>(options, module, world);
}

std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& parameter : module.parameters())
    if (parameter.requires_grad()) out.push_back(parameter);
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
