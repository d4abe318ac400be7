// "ddp" and "single": the module's model as it is (its network, or the module itself when it has its
// own layers), under cohort::DistributedDataParallel for ddp, which averages gradients over ranks
// while backward runs, and the optimizer configure_optimizers returns over its trainable parameters.
// Accumulation keeps DDP's reduction for the boundary micro-batch (no_sync before it), as Lightning does.
// TrainerOptions.ddp_comm_hook registers a comm hook on the DDP (options.cpp has checked the names).
// With tensor_parallel_size > 1 the DDP runs over the mesh's data_parallel axis, the data is split
// over it, checkpoints and full_parameters() hold whole tensors and clipping takes the whole norm.
#include <cmath>
#include <optional>

#include "checkpoint/entry.h"
#include "cohort/comm_hooks.h"
#include "cohort/ddp.h"
#include "trainer/strategy.h"
#include "trainer/whole_tensor_state.h"

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

// The sum of the squares of `parameters`' gradients, a double on the CPU (one transfer).
torch::Tensor squared_norm(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> norms;
  for (const torch::Tensor& p : parameters)
    if (p.grad().defined()) norms.push_back(p.grad().norm().to(torch::kDouble));
  if (norms.empty()) return torch::zeros({1}, torch::kDouble);
  return torch::stack(norms).pow(2).sum().reshape({1}).to(torch::kCPU);
}

class DdpStrategy : public ModuleOptimizerStrategy {
 public:
  DdpStrategy(const ResolvedOptions& options, TrainingModule& module, const World& world, std::shared_ptr<Mesh> mesh)
      : ModuleOptimizerStrategy(options), module_(module), world_(world), mesh_(std::move(mesh)) {
    if (options.strategy == StrategyKind::kDdp) {
      // Under tensor parallelism the gradients are averaged over the data-parallel axis only.
      core_.emplace(model_pointer(module),
                    DDPOptions().comm(mesh_ ? mesh_->group_ptr("data_parallel") : world.comm_ptr()));
      if (auto hook = comm_hook_of(options.raw)) core_->register_comm_hook(std::move(hook));
    }
    make_optimizer(module, trainable_parameters(module.model()));
    if (!mesh_) return;
    // configure_model split the layers before the strategy was made: the cuts are known from here on.
    cut_of_ = module_cuts(module.model());
    for (const auto& item : module.model().named_parameters())
      (cut_of_(item.key()) ? cut_parameters_ : whole_parameters_).push_back(item.value());
  }

  std::pair<int, int> data_split(const World& world) const override {
    if (!mesh_) return Strategy::data_split(world);
    return {mesh_->size("data_parallel"), mesh_->coordinate("data_parallel")};
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

  void add_to(CheckpointState& state) override {
    if (!mesh_) {
      state.add("model", module_.model()).add("optimizer", *optimizer_);
      return;
    }
    // Whole tensors: a checkpoint any tensor_parallel_size resumes (whole_tensor_state.h).
    torch::nn::Module& model = module_.model();
    state.add("model", whole_tensor_state(ckpt::module_state(model), cut_of_))
        .add("optimizer",
             whole_tensor_state(ckpt::optimizer_state("optimizer", *optimizer_), optimizer_cuts(model, *optimizer_)));
  }
  void load_pretrained(const std::string& path, const StateDictOptions& options) override {
    load_pretrained_parts(module_.model(), path, options, tensor_parallel_parts(cut_of_));
  }
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters() override {
    auto parameters = float_parameters(module_.model());
    if (!mesh_) return parameters;
    for (auto& [name, value] : parameters)
      if (const auto* cut = cut_of_(name)) value = tp::detail::gather_cut(value, *cut);
    return parameters;
  }
  std::string describe() const override {
    if (!core_) return "single device";
    const std::string& hook = options_.raw.ddp_comm_hook();
    std::string out = "ddp (" + std::to_string(world_.size()) + " rank(s)";
    if (mesh_)
      out += ": " + std::to_string(mesh_->size("data_parallel")) + " data parallel x " +
             std::to_string(mesh_->size("tensor_parallel")) + " tensor parallel";
    return out + (hook.empty() ? "" : ", " + hook + " comm hook") + ")";
  }
  // The global norm over whole tensors: a cut parameter's squares summed over the tp group, a whole
  // one (the same on every tp rank) counted once, so every rank scales alike (torch's clip_grad_norm_).
  void clip_gradients(double max_norm) override {
    if (!mesh_) return ModuleOptimizerStrategy::clip_gradients(max_norm);
    torch::NoGradGuard no_grad;
    const double cut = mesh_->group("tensor_parallel").allreduce(squared_norm(cut_parameters_)).item<double>();
    const double norm = std::sqrt(cut + squared_norm(whole_parameters_).item<double>());
    const double scale = max_norm / (norm + 1e-6);
    if (scale >= 1) return;
    for (const auto* list : {&cut_parameters_, &whole_parameters_})
      for (const torch::Tensor& p : *list)
        if (p.grad().defined()) p.grad().mul_(scale);
  }

  std::unique_ptr<AutocastGuard> autocast() const override {
    if (options_.precision != Precision::kBf16Mixed) return nullptr;
    return std::make_unique<AutocastGuard>(world_.device().type(), torch::kBFloat16);
  }

 private:
  TrainingModule& module_;
  World world_;
  std::shared_ptr<Mesh> mesh_;  // tensor parallel: (data_parallel, tensor_parallel)
  std::function<const tp::detail::ParameterCut*(const std::string&)> cut_of_;  // tensor parallel: by name
  std::vector<torch::Tensor> cut_parameters_, whole_parameters_;               // tensor parallel
  std::optional<DataParallelCore> core_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(const ResolvedOptions& options, TrainingModule& module, const World& world,
                                            const std::shared_ptr<Mesh>& mesh) {
  return std::make_unique<DdpStrategy>(options, module, world, mesh);
}

}  // namespace cohort::detail
