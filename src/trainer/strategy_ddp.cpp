// "ddp" and "single": the module's model as it is (its network, or the module itself when it has its
// own layers), under cohort::DistributedDataParallel for ddp, which averages gradients over ranks
// while backward runs, and the optimizer configure_optimizers returns over its trainable parameters.
// Accumulation keeps DDP's reduction for the boundary micro-batch (no_sync before it), as Lightning does.
#include <optional>

#include "cohort/ddp.h"
#include "trainer/strategy.h"

namespace cohort::detail {
namespace {

class DdpStrategy : public ModuleOptimizerStrategy {
 public:
  DdpStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : ModuleOptimizerStrategy(options), module_(module), world_(world) {
    if (options.strategy == StrategyKind::kDdp) core_.emplace(model_pointer(module), DDPOptions());
    make_optimizer(module, trainable_parameters(module.model()));
  }

  torch::Tensor forward(const torch::Tensor& input) override { return module_.network()->forward(input); }

  void backward(const torch::Tensor& loss, bool boundary) override {
    const torch::Tensor scaled = per_micro_batch(loss);
    if (core_ && !boundary) {
      auto guard = core_->no_sync();
      scaled.backward();
    } else {
      scaled.backward();
    }
  }

  void add_to(CheckpointState& state) override { state.add("model", module_.model()).add("optimizer", *optimizer_); }
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    return float_parameters(module_.model());
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
  TrainingModule& module_;
  World world_;
  std::optional<DataParallelCore> core_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(const ResolvedOptions& options, TrainingModule& module,
                                            const World& world) {
  return std::make_unique<DdpStrategy>(options, module, world);
}

}  // namespace cohort::detail
