// parallelize_module (cohort/tensor_parallel.h): matches the plan's names against the module tree,
// cuts each named layer's parameters in place (set_data: the same tensors, so an optimizer built
// before still holds them) and leaves the layer its Split.
#include <algorithm>
#include <mutex>
#include <sstream>

#include "core/check.h"
#include "core/text.h"
#include "tp/parameter_cuts.h"
#include "tp/split.h"

namespace cohort::tp {
namespace {

std::vector<std::string> parts(const std::string& name) {
  std::vector<std::string> out;
  std::stringstream in(name);
  for (std::string part; std::getline(in, part, '.');) out.push_back(part);
  return out;
}

// '*' stands for one whole part of a dotted name.
bool matches(const std::string& pattern, const std::string& name) {
  const auto want = parts(pattern), have = parts(name);
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != "*" && want[i] != have[i]) return false;
  return true;
}

const char* style_name(const ParallelStyle& style) {
  if (std::holds_alternative<ColwiseParallel>(style)) return "ColwiseParallel";
  if (std::holds_alternative<RowwiseParallel>(style)) return "RowwiseParallel";
  return "SequenceParallel";
}

void set_cut(torch::Tensor& parameter, int64_t dim, const std::shared_ptr<Comm>& comm, int64_t fused = 1) {
  if (!parameter.defined()) return;
  torch::NoGradGuard no_grad;
  parameter.set_data(detail::cut_of(parameter.detach(), {dim, fused, parameter.size(dim), comm}));
}

void split_linear(LinearImpl& linear, const std::string& name, const std::shared_ptr<Comm>& tp,
                  const ParallelStyle& style) {
  const std::vector<int64_t> shape = linear.weight.sizes().vec();
  if (const auto* col = std::get_if<ColwiseParallel>(&style)) {
    COHORT_CHECK_KIND(kInvalidArgument, !col->input_layout().is_partial(), "ColwiseParallel on '", name,
                      "': its input arrives Replicate() or Shard(1), not Partial(sum)");
    COHORT_CHECK_KIND(kInvalidArgument,
                      col->output_layout().is_replicate() || col->output_layout() == Placement::shard(-1),
                      "ColwiseParallel on '", name, "': output_layout ", col->output_layout().str(),
                      "; a column-parallel output is Shard(-1) (kept split) or Replicate() (gathered)");
    COHORT_CHECK_KIND(kInvalidArgument, col->fused() >= 1 && shape[0] % col->fused() == 0, "ColwiseParallel on '", name,
                      "': fused ", col->fused(), " does not divide its ", shape[0], " output features");
    set_cut(linear.weight, 0, tp, col->fused());
    set_cut(linear.bias, 0, tp, col->fused());
  } else if (const auto* row = std::get_if<RowwiseParallel>(&style)) {
    COHORT_CHECK_KIND(kInvalidArgument,
                      row->input_layout().is_replicate() || row->input_layout() == Placement::shard(-1),
                      "RowwiseParallel on '", name, "': input_layout ", row->input_layout().str(),
                      "; a row-parallel input arrives Shard(-1) (split) or Replicate() (cut here)");
    COHORT_CHECK_KIND(kInvalidArgument, !row->output_layout().is_partial(), "RowwiseParallel on '", name,
                      "': its output is summed: Replicate() or Shard(1), not Partial(sum)");
    set_cut(linear.weight, 1, tp);
  }
  linear.split = std::make_shared<Split>(Split{tp, style, shape});
}

void split_embedding(EmbeddingImpl& embedding, const std::string& name, const std::shared_ptr<Comm>& tp,
                     const ParallelStyle& style) {
  const auto* row = std::get_if<RowwiseParallel>(&style);
  COHORT_CHECK_KIND(kInvalidArgument, row != nullptr, style_name(style), " on '", name,
                    "', an Embedding: an Embedding is split by vocabulary, RowwiseParallel");
  COHORT_CHECK_KIND(kInvalidArgument, !row->output_layout().is_partial(), "RowwiseParallel on '", name,
                    "': its output is summed: Replicate() or Shard(1), not Partial(sum)");
  const auto& o = embedding.options;
  COHORT_CHECK_KIND(kInvalidArgument, !o.padding_idx() && !o.max_norm() && !o.sparse(), "RowwiseParallel on '", name,
                    "': an Embedding with padding_idx, max_norm or sparse is not split (each needs the whole "
                    "vocabulary's rows)");
  const std::vector<int64_t> shape = embedding.weight.sizes().vec();
  set_cut(embedding.weight, 0, tp);
  embedding.split = std::make_shared<Split>(Split{tp, style, shape});
}

// Each parameter's gradient summed over the tp ranks as it is made (before DDP or the ZeRO engine
// see it): the module ran on this rank's positions only. A parameter summed once already is refused.
// The parameters are held weakly: a freed one's address, reused by a later model, is not "summed".
void sum_gradients_over(torch::nn::Module& module, const std::string& name, const std::shared_ptr<Comm>& tp) {
  static std::mutex mutex;
  static std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> summed;
  const auto parameters = module.parameters();
  COHORT_CHECK_KIND(kInvalidArgument, !parameters.empty(), "SequenceParallel on '", name,
                    "': it has no parameters, and a module without them needs no plan entry");
  for (const torch::Tensor& p : parameters) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      summed.erase(std::remove_if(summed.begin(), summed.end(), [](const auto& held) { return held.expired(); }),
                   summed.end());
      const bool again = std::any_of(summed.begin(), summed.end(), [&](const auto& held) {
        return held._unsafe_get_target() == p.unsafeGetTensorImpl();
      });
      COHORT_CHECK_KIND(kInvalidArgument, !again, "parallelize_module: '", name,
                        "' is split already (SequenceParallel)");
      summed.emplace_back(p.getIntrusivePtr());
    }
    std::shared_ptr<Comm> comm = tp;
    p.register_hook([comm](const torch::Tensor& grad) { return comm->allreduce(grad.clone()); });
  }
}

void split_one(torch::nn::Module& module, const std::string& name, const std::shared_ptr<Comm>& tp,
               const ParallelStyle& style) {
  if (std::holds_alternative<SequenceParallel>(style)) return sum_gradients_over(module, name, tp);
  if (auto* linear = dynamic_cast<LinearImpl*>(&module)) {
    COHORT_CHECK_KIND(kInvalidArgument, linear->split == nullptr, "parallelize_module: '", name, "' is split already");
    return split_linear(*linear, name, tp, style);
  }
  if (auto* embedding = dynamic_cast<EmbeddingImpl*>(&module)) {
    COHORT_CHECK_KIND(kInvalidArgument, embedding->split == nullptr, "parallelize_module: '", name,
                      "' is split already");
    return split_embedding(*embedding, name, tp, style);
  }
  std::string kind = module.name();  // "torch::nn::LinearImpl": the holder's name users write
  if (kind.size() > 4 && kind.compare(kind.size() - 4, 4, "Impl") == 0) kind.resize(kind.size() - 4);
  COHORT_CHECK_KIND(kInvalidArgument, false, "parallelize_module: '", name, "' is a ", kind, "; ", style_name(style),
                    " splits cohort::tp::Linear or Embedding (LibTorch modules have no forward hooks: build the "
                    "layer as the cohort::tp one, the same module until it is split)");
}

}  // namespace

void parallelize_module(torch::nn::Module& module, std::shared_ptr<Comm> tp, const ParallelizePlan& plan) {
  COHORT_CHECK_KIND(kInvalidArgument, tp != nullptr, "parallelize_module: no tp Comm");
  const auto modules = module.named_modules("", /*include_self=*/false);
  for (const PlanEntry& entry : plan) {
    int found = 0;
    for (const auto& item : modules) {
      if (!matches(entry.name, item.key())) continue;
      split_one(*item.value(), item.key(), tp, entry.style);
      ++found;
    }
    COHORT_CHECK_KIND(kInvalidArgument, found > 0, "parallelize_module: the plan names '",
                      cohort::detail::excerpt(entry.name), "', which is no module of ", module.name(), " (",
                      modules.size(), " submodule(s), e.g. '",
                      modules.is_empty() ? std::string() : modules.begin()->key(), "')");
  }
}

}  // namespace cohort::tp
