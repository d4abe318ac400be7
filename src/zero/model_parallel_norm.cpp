// ModelParallelNorm (see model_parallel_norm.h).
#include "zero/model_parallel_norm.h"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_set>

#include "core/check.h"

namespace cohort::detail {

ModelParallelNorm::ModelParallelNorm(const EngineSettings& settings, const StateStore& store,
                                     const TrainableParameters& params, const EngineOptions& options)
    : comm_(options.model_parallel_comm()) {
  COHORT_CHECK_KIND(kInvalidArgument, comm_ != nullptr, "EngineOptions::model_parallel_replicated lists ",
                    options.model_parallel_replicated().size(),
                    " parameter(s) but model_parallel_comm is not set: they are whole over which group?");
  std::unordered_set<const c10::TensorImpl*> whole;
  for (const auto& p : options.model_parallel_replicated()) whole.insert(p.unsafeGetTensorImpl());
  // The reduced gradient is the whole flat group at stage 0 (and on one rank), else this rank's shard.
  const bool flat = settings.stage == 0 || settings.world == 1;
  for (int64_t g = 0; g < store.size(); ++g) {
    const GroupLayout& layout = store.layout(g);
    const int64_t begin = flat ? 0 : layout.owned(settings.rank).first;
    const int64_t end = flat ? layout.padded : layout.owned(settings.rank).second;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t k = 0; k < layout.params.size(); ++k) {
      if (!whole.count(params.at(layout.params[k]).unsafeGetTensorImpl())) continue;
      const int64_t first = std::max(begin, layout.offsets[k]);
      const int64_t last = std::min(end, layout.offsets[k] + params.numel(layout.params[k]));
      if (first < last) ranges.emplace_back(first - begin, last - begin);
    }
    whole_ranges_.push_back(std::move(ranges));
  }
}

torch::Tensor ModelParallelNorm::squared_norm(int64_t g, const torch::Tensor& grad) const {
  auto squared = [](const torch::Tensor& t) { return t.norm().to(torch::kDouble).pow(2); };
  torch::Tensor total = squared(grad);
  const double surplus = 1.0 - 1.0 / comm_->size();  // of a whole parameter's elements: the others count them too
  for (const auto& [begin, end] : whole_ranges_[size_t(g)])
    total -= squared(grad.narrow(0, begin, end - begin)) * surplus;
  return total.cpu();  // one copy to the host per group, as without tensor parallelism
}

void ModelParallelNorm::sum(torch::Tensor& total) const {
  if (comm_->size() > 1) comm_->allreduce(total, ReduceOp::kSum);
}

void ModelParallelNorm::max(torch::Tensor& flag) const {
  if (comm_->size() > 1) comm_->allreduce(flag, ReduceOp::kMax);
}

}  // namespace cohort::detail
