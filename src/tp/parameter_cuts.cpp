// parameter_cuts, cut_of, gather_cut (see parameter_cuts.h).
#include "tp/parameter_cuts.h"

#include <vector>

#include "cohort/dtensor.h"
#include "cohort/tensor_parallel.h"
#include "core/check.h"

namespace cohort::tp::detail {
namespace {

void add(std::map<std::string, ParameterCut>& out, const std::string& prefix, const char* name,
         const torch::Tensor& parameter, ParameterCut cut) {
  if (parameter.defined()) out.emplace(prefix.empty() ? name : prefix + "." + name, std::move(cut));
}

}  // namespace

// The module itself is looked at by reference: named_modules(include_self) needs it held by a
// shared_ptr, which a TrainingModule made on the stack is not.
std::map<std::string, ParameterCut> parameter_cuts(torch::nn::Module& module) {
  std::map<std::string, ParameterCut> out;
  const auto visit = [&](const std::string& prefix, torch::nn::Module* m) {
    if (auto* linear = dynamic_cast<LinearImpl*>(m); linear != nullptr && linear->split) {
      const Split& split = *linear->split;
      if (const auto* col = std::get_if<ColwiseParallel>(&split.style)) {
        const ParameterCut rows{0, col->fused(), split.weight_shape[0], split.comm};
        add(out, prefix, "weight", linear->weight, rows);
        add(out, prefix, "bias", linear->bias, rows);
      } else {
        add(out, prefix, "weight", linear->weight, {1, 1, split.weight_shape[1], split.comm});
      }
    } else if (auto* embedding = dynamic_cast<EmbeddingImpl*>(m); embedding != nullptr && embedding->split) {
      add(out, prefix, "weight", embedding->weight, {0, 1, embedding->split->weight_shape[0], embedding->split->comm});
    }
  };
  visit("", &module);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) visit(item.key(), item.value().get());
  return out;
}

torch::Tensor cut_of(const torch::Tensor& whole, const ParameterCut& cut) {
  COHORT_CHECK_KIND(kInvalidArgument, whole.dim() > cut.dim && whole.size(cut.dim) == cut.whole, "a tensor of shape ",
                    whole.sizes(), " is not whole along dimension ", cut.dim, " (", cut.whole, ")");
  std::vector<torch::Tensor> pieces;
  for (const torch::Tensor& part : whole.chunk(cut.fused, cut.dim)) {
    const auto [first, count] = shard_range(part.size(cut.dim), cut.comm->size(), cut.comm->rank());
    pieces.push_back(part.narrow(cut.dim, first, count));
  }
  return torch::cat(pieces, cut.dim).clone();
}

torch::Tensor gather_cut(const torch::Tensor& local, const ParameterCut& cut) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& part : local.detach().chunk(cut.fused, cut.dim)) {
    std::vector<int64_t> shape = part.sizes().vec();
    shape[cut.dim] = cut.whole / cut.fused;
    parts.push_back(DTensor::from_local(part.contiguous(), cut.comm, Placement::shard(cut.dim), shape).full_tensor());
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts, cut.dim);
}

}  // namespace cohort::tp::detail
