// Cutting a Sequential into pipeline stages: by layer count, by balanced parameter counts (the linear
// partition problem, solved exactly by dynamic programming over the few layers a model has), or at
// boundaries the user gives. The stages share the model's layers and keep their names.
#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>

#include "cohort/error.h"
#include "cohort/pipeline.h"
#include "core/check.h"

namespace cohort::pipeline {
namespace {

std::vector<int64_t> uniform_boundaries(int64_t layers, int stages) {
  std::vector<int64_t> bounds{0};
  for (int s = 0; s < stages; ++s) bounds.push_back(bounds.back() + layers / stages + (s < layers % stages ? 1 : 0));
  return bounds;
}

// Contiguous stages of at least one layer whose largest parameter sum is the smallest possible; among
// those, the most even layer counts (no stage of a lone Flatten), then the earliest cuts: the same on
// every rank.
std::vector<int64_t> balanced_boundaries(const std::vector<int64_t>& weights, int stages) {
  const int n = int(weights.size());
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  using Cost = std::pair<int64_t, int64_t>;  // (largest parameter sum, largest layer count)
  const Cost kNone{std::numeric_limits<int64_t>::max(), 0};
  // cost[k][j]: the best cost of the first j layers in k stages; cut[k][j]: where stage k starts.
  std::vector<std::vector<Cost>> cost(stages + 1, std::vector<Cost>(n + 1, kNone));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  cost[0][0] = {0, 0};
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= n; ++j)
      for (int c = k - 1; c < j; ++c) {
        if (cost[k - 1][c] == kNone) continue;
        const Cost value{std::max(cost[k - 1][c].first, prefix[j] - prefix[c]),
                         std::max<int64_t>(cost[k - 1][c].second, j - c)};
        if (value < cost[k][j]) {
          cost[k][j] = value;
          cut[k][j] = c;
        }
      }
  std::vector<int64_t> bounds(stages + 1, n);
  for (int k = stages, j = n; k > 0; --k) {
    j = cut[k][j];
    bounds[k - 1] = j;
  }
  return bounds;
}

void check_boundaries(const std::vector<int64_t>& bounds, int64_t layers, int stages) {
  std::ostringstream text;
  for (size_t i = 0; i < bounds.size(); ++i) text << (i ? ", " : "") << bounds[i];
  COHORT_CHECK_KIND(kInvalidArgument,
                    int(bounds.size()) == stages + 1 && bounds.front() == 0 && bounds.back() == layers,
                    "pipeline partition: boundaries {", text.str(), "} must be ", stages + 1,
                    " layer indices from 0 to ", layers, " (stage s holds layers [b[s], b[s+1]))");
  for (int s = 0; s < stages; ++s)
    COHORT_CHECK_KIND(kInvalidArgument, bounds[s] < bounds[s + 1], "pipeline partition: boundaries {", text.str(),
                      "} leave stage ", s, " without a layer (they must increase strictly)");
}

int64_t trainable_parameters(const std::shared_ptr<torch::nn::Module>& module) {
  int64_t count = 0;
  for (const auto& p : module->parameters())
    if (p.requires_grad()) count += p.numel();
  return count;
}

}  // namespace

std::vector<int64_t> partition_boundaries(const std::vector<int64_t>& layer_parameters, int stages,
                                          const std::string& method) {
  const int64_t layers = int64_t(layer_parameters.size());
  COHORT_CHECK_KIND(kInvalidArgument, stages >= 1 && stages <= layers, "pipeline partition: ", stages,
                    " stages for a model of ", layers, " layers (each stage needs at least one layer: 1 to ", layers,
                    " stages)");
  if (method == "uniform") return uniform_boundaries(layers, stages);
  if (method == "parameters") return balanced_boundaries(layer_parameters, stages);
  throw Error("pipeline partition: method '" + method + "' is not one of: uniform, parameters " +
                  "(or give PartitionOptions::boundaries)",
              ErrorKind::kInvalidArgument);
}

Partition partition(const torch::nn::Sequential& model, int stages, const PartitionOptions& options) {
  const auto& names = model->named_children();
  std::vector<int64_t> weights;
  for (const auto& child : names) weights.push_back(trainable_parameters(child.value()));
  Partition out;
  if (options.boundaries().empty()) {
    out.boundaries = partition_boundaries(weights, stages, options.method());
  } else {
    out.boundaries = options.boundaries();
    check_boundaries(out.boundaries, int64_t(weights.size()), stages);
  }
  for (int s = 0; s < stages; ++s) {
    torch::nn::Sequential stage;
    int64_t params = 0;
    for (int64_t i = out.boundaries[s]; i < out.boundaries[s + 1]; ++i) {
      stage->push_back(names[i].key(), *(model->begin() + i));  // shares the layer
      params += weights[i];
    }
    out.stages.push_back(stage);
    out.parameters.push_back(params);
  }
  return out;
}

std::string Partition::describe() const {
  std::ostringstream out;
  for (size_t s = 0; s < stages.size(); ++s) {
    out << "stage " << s << ": layers " << boundaries[s] << "-" << boundaries[s + 1] - 1 << " (";
    const auto& layers = stages[s]->children();
    for (size_t i = 0; i < layers.size(); ++i) {
      std::string name = layers[i]->name();
      if (name.rfind("torch::nn::", 0) == 0) name = name.substr(11);
      if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
      out << (i ? ", " : "") << name;
    }
    out << "), " << parameters[s] << " parameters\n";
  }
  return out.str();
}

std::vector<torch::nn::Sequential> stages_of_rank(const Partition& partition, int ranks, int rank) {
  COHORT_CHECK_KIND(kInvalidArgument, ranks >= 1 && rank >= 0 && rank < ranks, "stages_of_rank: rank ", rank, " of ",
                    ranks, " ranks is out of range");
  const int stages = int(partition.stages.size());
  COHORT_CHECK_KIND(kInvalidArgument, stages % ranks == 0, "stages_of_rank: ", stages,
                    " stages do not spread evenly over ", ranks,
                    " ranks (an interleaved pipeline needs stages_per_rank x ranks stages)");
  std::vector<torch::nn::Sequential> mine;
  for (int s = rank; s < stages; s += ranks) mine.push_back(partition.stages[s]);
  return mine;
}

}  // namespace cohort::pipeline
