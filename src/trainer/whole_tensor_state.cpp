// whole_tensor_state, module_cuts, optimizer_cuts (see whole_tensor_state.h).
#include "trainer/whole_tensor_state.h"

#include <torch/optim/optimizer.h>

#include "checkpoint/format_versioned.h"
#include "core/check.h"
#include "tp/cut_runs.h"

namespace cohort::detail {
namespace {

using tp::detail::ParameterCut;
using CutOf = std::function<const ParameterCut*(const std::string&)>;

class WholeTensorState : public Stateful, public ckpt::FormatVersioned {
 public:
  WholeTensorState(std::shared_ptr<Stateful> inner, CutOf cut_of)
      : inner_(std::move(inner)), cut_of_(std::move(cut_of)) {}

  void prepare_load() override {
    inner_->prepare_load();
    loading_ = true;
  }

  // Saving: the cut tensors gathered whole. Loading: whole holders the checkpoint fills, cut into the
  // live tensors by load_state_values (the checkpoint copies tensors before it sets values).
  std::vector<StateTensor> state_tensors() override {
    std::vector<StateTensor> out = inner_->state_tensors();
    pending_.clear();
    for (StateTensor& t : out) {
      const ParameterCut* cut = cut_of_(t.name);
      if (cut == nullptr) continue;
      COHORT_CHECK_KIND(kInternal, t.kind == StateKind::kReplicated && t.part < 0, "tensor parallel checkpoint: '",
                        t.name, "' is not a replicated tensor in memory");
      if (loading_) {
        std::vector<int64_t> shape = t.tensor.sizes().vec();
        shape[cut->dim] = cut->whole;
        torch::Tensor whole = torch::empty(shape, t.tensor.options());
        pending_.push_back({t.tensor, whole, *cut});
        t.tensor = whole;
      } else {
        t.tensor = tp::detail::gather_cut(t.tensor, *cut);
      }
    }
    loading_ = false;  // the next call is a save's (also when this load fails)
    return out;
  }

  StateValues state_values() const override { return inner_->state_values(); }
  void set_format_version(int version) override { ckpt::tell_format_version(*inner_, version); }
  void check_state_values(const StateValues& values, int saved_world_size) const override {
    inner_->check_state_values(values, saved_world_size);
  }
  void load_state_values(const StateValues& values) override {
    torch::NoGradGuard no_grad;
    for (const Pending& p : pending_) p.live.copy_(tp::detail::cut_of(p.whole, p.cut));
    pending_.clear();
    inner_->load_state_values(values);
  }
  bool tensors_optional() const override { return inner_->tensors_optional(); }

 private:
  struct Pending {
    torch::Tensor live, whole;
    ParameterCut cut;
  };
  std::shared_ptr<Stateful> inner_;
  CutOf cut_of_;
  std::vector<Pending> pending_;
  bool loading_ = false;
};

}  // namespace

std::shared_ptr<Stateful> whole_tensor_state(std::shared_ptr<Stateful> inner, CutOf cut_of) {
  return std::make_shared<WholeTensorState>(std::move(inner), std::move(cut_of));
}

CutOf module_cuts(torch::nn::Module& module) {
  auto cuts = std::make_shared<std::map<std::string, ParameterCut>>(tp::detail::parameter_cuts(module));
  return [cuts](const std::string& name) -> const ParameterCut* {
    const auto found = cuts->find(name);
    return found == cuts->end() ? nullptr : &found->second;
  };
}

CutOf optimizer_cuts(torch::nn::Module& module, torch::optim::Optimizer& optimizer) {
  const auto by_name = tp::detail::parameter_cuts(module);
  auto cuts = std::make_shared<std::map<std::string, ParameterCut>>();  // "g0.p3" -> its parameter's cut
  std::map<const void*, const ParameterCut*> by_tensor;
  for (const auto& item : module.named_parameters()) {
    const auto found = by_name.find(item.key());
    if (found != by_name.end()) by_tensor[item.value().unsafeGetTensorImpl()] = &found->second;
  }
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const auto found = by_tensor.find(groups[g].params()[i].unsafeGetTensorImpl());
      if (found != by_tensor.end()) (*cuts)["g" + std::to_string(g) + ".p" + std::to_string(i)] = *found->second;
    }
  return [cuts](const std::string& name) -> const ParameterCut* {
    const size_t dot = name.rfind('.');  // "g0.p3.exp_avg" -> "g0.p3"
    const auto found = dot == std::string::npos ? cuts->end() : cuts->find(name.substr(0, dot));
    return found == cuts->end() ? nullptr : &found->second;
  };
}

std::function<std::optional<ParameterPart>(const std::string&)> tensor_parallel_part_of(CutOf cut_of) {
  if (!cut_of) return nullptr;
  return [cut_of](const std::string& name) -> std::optional<ParameterPart> {
    const ParameterCut* cut = cut_of(name);
    if (cut == nullptr) return std::nullopt;
    ParameterPart part;
    part.whole_shape = [cut](std::vector<int64_t> shape) {
      shape[size_t(cut->dim)] = cut->whole;
      return shape;
    };
    part.runs = [cut](const std::vector<int64_t>& whole_shape, int64_t begin, int64_t end) {
      std::vector<PartRun> out;
      for (const auto& run :
           tp::detail::cut_runs(whole_shape, cut->dim, cut->fused, cut->comm->size(), cut->comm->rank(), begin, end))
        out.push_back({run.local, run.whole, run.count});
      return out;
    };
    part.gather = [cut](const torch::Tensor& local) { return tp::detail::gather_cut(local, *cut); };
    part.cut = [cut](const torch::Tensor& whole) { return tp::detail::cut_of(whole, *cut); };
    part.holder = cut->comm->rank();
    part.holders = cut->comm->size();
    return part;
  };
}

LocalParts tensor_parallel_parts(CutOf cut_of) {
  if (!cut_of) return nullptr;
  return [cut_of](const std::string& name, const std::vector<int64_t>& shape) -> std::optional<LocalPart> {
    const ParameterCut* cut = cut_of(name);
    if (cut == nullptr) return std::nullopt;
    LocalPart part{shape, [cut = *cut](const torch::Tensor& whole) { return tp::detail::cut_of(whole, cut); }, nullptr};
    part.whole_shape[size_t(cut->dim)] = cut->whole;
    // Only the part's runs are read from the file (issue 42: never the whole tensor).
    part.runs = [cut = *cut, whole_shape = part.whole_shape](int64_t begin, int64_t end) {
      std::vector<PartRun> out;
      for (const auto& run :
           tp::detail::cut_runs(whole_shape, cut.dim, cut.fused, cut.comm->size(), cut.comm->rank(), begin, end))
        out.push_back({run.local, run.whole, run.count});
      return out;
    };
    return part;
  };
}

}  // namespace cohort::detail
