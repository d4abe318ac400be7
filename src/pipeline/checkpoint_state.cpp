// Checkpoints of a pipelined model: the Statefuls of this rank's stages (cohort/checkpoint.h). Every
// tensor is StateKind::kOwned and named as in the whole model ("3.weight", "3.weight.exp_avg"), so
// each stage's shard is written by one of the ranks holding it, a load takes each tensor by name from
// whichever rank saved it (another partition loads too), and cohort-ckpt consolidate gives the whole
// model's state_dict. The cut itself is learnt at construction (note "layer ranges").
#include <torch/torch.h>

#include "checkpoint/format_versioned.h"
#include "checkpoint/step_tensors.h"
#include "compat/optimizer_state.h"
#include "core/check.h"
#include "core/log.h"
#include "core/text.h"
#include "pipeline/pipeline_impl.h"
#include "zero/parameter_state.h"

namespace cohort::pipeline::detail {
namespace {

// The whole-model layer range [first, first + count) of a stage whose children are named by their
// place in the whole model ("3", "4", ...), or {-1, count} when they are not (a stage built by hand).
std::pair<int64_t, int64_t> layer_range(const torch::nn::Sequential& stage) {
  const auto children = stage->named_children();
  int64_t first = -1;
  for (size_t i = 0; i < children.size(); ++i) {
    const std::string& key = children[i].key();
    if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos) return {-1, int64_t(children.size())};
    const int64_t index = std::stoll(key);
    if (i == 0) first = index;
    if (index != first + int64_t(i)) return {-1, int64_t(children.size())};
  }
  return {first, int64_t(children.size())};
}

// The parameters of `stage` its optimizer's checkpoint entry covers, by stage name.
std::vector<std::pair<std::string, torch::Tensor>> trainable_parameters(const torch::nn::Sequential& stage) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : stage->named_parameters(true))
    if (item.value().requires_grad()) out.emplace_back(item.key(), item.value());
  return out;
}

// Parameters and buffers of a rank's stages.
class StageModuleState : public Stateful {
 public:
  explicit StageModuleState(const PipelineImpl& pipeline) : pipeline_(pipeline) {}
  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    for (const auto& stage : pipeline_.stages) {
      for (const auto& item : stage->named_parameters(true))
        out.push_back({pipeline_.whole_name(item.key()), item.value(), StateKind::kOwned});
      for (const auto& item : stage->named_buffers(true))
        out.push_back({pipeline_.whole_name(item.key()), item.value(), StateKind::kOwned});
    }
    return out;
  }
  StateValues state_values() const override {
    StateValues values{{"pipeline.stages", double(pipeline_.layer_bounds.size() - 1)}};
    for (size_t s = 0; s < pipeline_.layer_bounds.size(); ++s)
      values["pipeline.bound" + std::to_string(s)] = double(pipeline_.layer_bounds[s]);
    return values;
  }
  void load_state_values(const StateValues& values) override {
    const auto stages = values.find("pipeline.stages");
    if (stages == values.end()) return;
    std::vector<int64_t> saved;  // stages held to 1..2^20 where the checkpoint was checked (counter_values.h)
    for (int64_t s = 0; s <= int64_t(stages->second); ++s) {
      const auto bound = values.find("pipeline.bound" + std::to_string(s));
      if (bound != values.end()) saved.push_back(int64_t(bound->second));
    }
    if (saved != pipeline_.layer_bounds)
      COHORT_INFO("pipeline: loaded a checkpoint saved as ", describe_bounds(saved), " into ",
                  describe_bounds(pipeline_.layer_bounds), " (each tensor taken by its name)");
  }

 private:
  const PipelineImpl& pipeline_;
};

// The per-parameter state of the user's optimizer over this rank's stages, by parameter name. A
// state's step (0 for SGD's momentum, which has none) is a tensor too, "<name>.step": unlike a
// Stateful's numbers (rank 0's only) it is saved by each stage's own ranks. Every trainable parameter
// has one, -1 before it has state, and the entry counts them ('pipeline.params', the whole pipeline's):
// a parameter whose whole state was deleted is missed, not read as "no state yet" (hostile pass 12,
// M-4). Checkpoints of format version 3 and older hold steps of the parameters with state only.
class StageOptimizerState : public Stateful, public cohort::detail::ckpt::FormatVersioned {
 public:
  StageOptimizerState(const PipelineImpl& pipeline, torch::optim::Optimizer& optimizer)
      : optimizer_(optimizer), trainable_params_(pipeline.trainable_params) {
    for (const auto& stage : pipeline.stages)
      for (auto& [name, p] : trainable_parameters(stage)) params_.emplace_back(pipeline.whole_name(name), p);
  }

  bool tensors_optional() const override { return true; }

  void prepare_load() override {
    loading_ = true;
    for (const auto& [name, p] : params_) {
      if (cohort::detail::find_param_state(optimizer_, p) != nullptr) continue;
      const auto* group = group_of(p);
      if (group == nullptr) continue;  // not this optimizer's parameter
      auto state = cohort::detail::fresh_state(optimizer_, group->options(), p);
      if (!state) continue;
      cohort::detail::set_param_state(optimizer_, p, std::move(state));
    }
  }

  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out;
    steps_.clear();
    for (const auto& [name, p] : params_) {
      auto* state = cohort::detail::find_param_state(optimizer_, p);
      if (state != nullptr)
        for (const auto& [field, t] : cohort::detail::state_fields(*state, "optimizer state of " + name))
          if (t.defined()) out.push_back({name + "." + field, t, StateKind::kOwned});
      const int64_t* step = state ? cohort::detail::step_of(*state) : nullptr;
      // Loading: -1 until the checkpoint's value lands (it stays -1 when the checkpoint has none).
      auto holder = torch::full({1}, loading_ || state == nullptr ? -1 : (step ? *step : 0), torch::kLong);
      steps_.emplace_back(name, holder);
      out.push_back({name + ".step", holder, StateKind::kOwned});
    }
    loading_ = false;  // the next call is a save's (also when this load fails)
    return out;
  }

  StateValues state_values() const override {
    StateValues values{{cohort::detail::ckpt::kPipelineParamsKey, double(trainable_params_)}};
    for (size_t g = 0; g < optimizer_.param_groups().size(); ++g)
      values["g" + std::to_string(g) + ".lr"] = optimizer_.param_groups()[g].options().get_lr();
    return values;
  }

  void set_format_version(int version) override { format_version_ = version; }

  // From format version 4 the entry counts the pipeline's trainable parameters (hostile pass 13, S-1:
  // the entry emptied, its tensors deleted, resumed with Adam restarted).
  void check_state_values(const StateValues& values, int) const override {
    const char* key = cohort::detail::ckpt::kPipelineParamsKey;
    const auto saved = values.find(key);
    if (saved == values.end()) {
      COHORT_CHECK_KIND(kIO, format_version_ < 4, "the pipeline optimizer's entry has no '", key,
                        "': from format version 4 on it counts the pipeline's trainable parameters (damaged or "
                        "edited)");
      return;
    }
    COHORT_CHECK_KIND(kInvalidArgument, saved->second == double(trainable_params_), "the pipeline optimizer's '", key,
                      "' is ", cohort::detail::number_text(saved->second), ", this pipeline has ", trainable_params_,
                      " trainable parameters: the checkpoint is another program's or was edited");
  }

  void load_state_values(const StateValues& values) override {
    for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
      const auto lr = values.find("g" + std::to_string(g) + ".lr");
      if (lr != values.end()) optimizer_.param_groups()[g].options().set_lr(lr->second);
    }
    for (const auto& [name, holder] : steps_) {
      const auto& p = param(name);
      auto* state = cohort::detail::find_param_state(optimizer_, p);
      const int64_t saved = holder.item<int64_t>();
      if (saved < 0) {  // saved without state: none, whatever this optimizer held (hostile pass 13, M-2)
        cohort::detail::erase_param_state(optimizer_, p);
        continue;
      }
      if (state == nullptr) continue;
      if (int64_t* step = cohort::detail::step_of(*state)) *step = saved;
    }
  }

 private:
  const torch::optim::OptimizerParamGroup* group_of(const torch::Tensor& p) const {
    for (const auto& group : optimizer_.param_groups())
      for (const auto& q : group.params())
        if (q.is_same(p)) return &group;
    return nullptr;
  }
  const torch::Tensor& param(const std::string& name) const {
    for (const auto& item : params_)
      if (item.first == name) return item.second;
    throw Error("pipeline optimizer state: no parameter '" + name + "'", ErrorKind::kInternal);
  }

  torch::optim::Optimizer& optimizer_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<std::pair<std::string, torch::Tensor>> steps_;
  bool loading_ = false;
  int64_t trainable_params_;
  int format_version_ = 0;  // the loading checkpoint's
};

}  // namespace

std::string describe_bounds(const std::vector<int64_t>& bounds) {
  if (bounds.size() < 2) return "an unknown partition";
  std::string text = std::to_string(bounds.size() - 1) + " stages (layers ";
  for (size_t s = 0; s + 1 < bounds.size(); ++s)
    text += (s ? " | " : "") + std::to_string(bounds[s]) + "-" + std::to_string(bounds[s + 1] - 1);
  return text + ")";
}

// Note "layer ranges": every rank tells the pipeline group the whole-model layer range of each of its
// stages and how many trainable parameters it has, so every rank knows the whole cut (saved with
// checkpoints, shown when a load reshards), whether the stages keep the whole model's layer names,
// which checkpoints need, and how many parameters the optimizer's checkpoint entry holds.
StageCut gather_stage_cut(Comm& comm, const Schedule& schedule, const std::vector<torch::nn::Sequential>& stages) {
  const int per_rank = int(stages.size());
  auto mine = torch::empty({per_rank, 3}, torch::kLong);
  for (int i = 0; i < per_rank; ++i) {
    const auto [first, count] = layer_range(stages[i]);
    mine[i][0] = first;
    mine[i][1] = count;
    mine[i][2] = int64_t(trainable_parameters(stages[i]).size());
  }
  const auto all = comm.size() > 1 ? comm.allgather(mine) : mine.unsqueeze(0);  // [ranks, per_rank, 3]
  StageCut cut{{0}, true};
  for (int s = 0; s < schedule.stages; ++s) {
    const auto range = all[schedule.rank_of(s)][s / schedule.ranks];
    const int64_t first = range[0].item<int64_t>(), count = range[1].item<int64_t>();
    if (first != cut.bounds.back()) cut.names_whole_model = false;
    cut.bounds.push_back(cut.bounds.back() + count);
    cut.trainable_params += range[2].item<int64_t>();
  }
  return cut;
}

}  // namespace cohort::pipeline::detail

namespace cohort::pipeline {

std::shared_ptr<Stateful> Pipeline::zero_state() {
  COHORT_CHECK_KIND(kInvalidArgument, impl_->replicas->has_zero(),
                    "Pipeline::zero_state: this pipeline has no ZeRO engines (PipelineOptions::zero is not set): add "
                    "model_state() and optimizer_state(optimizer)");
  impl_->check_whole_model_names("zero_state");
  // Each stage's engine by parameter under the whole model's names, its frozen parameters and buffers
  // owned by the stage's ranks.
  cohort::detail::ParameterStateOptions options;
  options.module_kind = StateKind::kOwned;
  if (impl_->options().parameter_names()) options.name_of = impl_->options().parameter_names();
  std::vector<ZeroEngineCore*> engines;
  for (int local = 0; local < impl_->replicas->zero_engines(); ++local)
    engines.push_back(&impl_->replicas->zero_engine(local));
  return cohort::detail::engines_parameter_state(engines, options);
}

std::shared_ptr<Stateful> Pipeline::model_state() {
  impl_->check_checkpointable("model_state");
  return std::make_shared<detail::StageModuleState>(*impl_);
}

std::shared_ptr<Stateful> Pipeline::optimizer_state(torch::optim::Optimizer& optimizer) {
  impl_->check_checkpointable("optimizer_state");
  return std::make_shared<detail::StageOptimizerState>(*impl_, optimizer);
}

std::string Pipeline::describe_partition() const { return detail::describe_bounds(impl_->layer_bounds); }

}  // namespace cohort::pipeline
