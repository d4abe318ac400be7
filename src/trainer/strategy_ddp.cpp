// "ddp" and "single": the module's model as it is (its network, or the module itself when it has its
// own layers), under cohort::DistributedDataParallel for ddp, which averages gradients over ranks
// while backward runs, and the optimizer configure_optimizers returns over its trainable parameters.
// Accumulation keeps DDP's reduction for the boundary micro-batch (no_sync before it), as Lightning does.
// TrainerOptions.ddp_comm_hook registers a comm hook on the DDP (options.cpp has checked the names).
#include <optional>

#include "cohort/comm_hooks.h"
#include "cohort/ddp.h"
#include "trainer/strategy.h"

namespace cohort::detail {
namespace {

std::shared_ptr<CommHook> comm_hook_of(const TrainerOptions& options) {
  const std::string& name = options.ddp_comm_hook();
  if (name == "fp16") return comm_hooks::fp16_compress();
  if (name == "bf16") return comm_hooks::bf16_compress();
  const auto powersgd = PowerSGDOptions()
                            .matrix_approximation_rank(options.powersgd_rank())
                            .start_iteration(options.powersgd_start_iteration());
  if (name == "powersgd") return comm_hooks::powersgd(powersgd);
  if (name == "batched_powersgd") return comm_hooks::batched_powersgd(powersgd);
  return nullptr;
}

class DdpStrategy : public ModuleOptimizerStrategy {
 public:
  DdpStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world)
      : ModuleOptimizerStrategy(options), module_(module), world_(world) {
    if (options.strategy == StrategyKind::kDdp) {
      core_.emplace(model_pointer(module), DDPOptions());
      if (auto hook = comm_hook_of(options.raw)) core_->register_comm_hook(std::move(hook));
    }
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
    const std::string& hook = options_.raw.ddp_comm_hook();
    return "ddp (" + std::to_string(world_.size()) + " rank(s)" + (hook.empty() ? "" : ", " + hook + " comm hook") +
           ")";
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
