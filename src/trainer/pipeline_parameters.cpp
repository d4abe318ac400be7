// PipelineParameters (see pipeline_parameters.h).
#include "trainer/pipeline_parameters.h"

#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "core/check.h"

namespace cohort::detail {

PipelineParameters::PipelineParameters(torch::nn::Sequential layers, pipeline::ParameterNames names,
                                       std::vector<int64_t> bounds, int pipe_ranks)
    : layers_(std::move(layers)),
      names_(std::move(names)),
      bounds_(std::move(bounds)),
      pipe_ranks_(pipe_ranks),
      cuts_(tp::detail::parameter_cuts(*layers_)) {
  for (const auto& [layer_name, cut] : cuts_) by_whole_.emplace(whole_name(layer_name), &cut);
}

int PipelineParameters::owner(const std::string& layer_name) const {
  const int64_t layer = std::stoll(layer_name.substr(0, layer_name.find('.')));
  const auto stage = std::upper_bound(bounds_.begin(), bounds_.end(), layer) - bounds_.begin() - 1;
  return int(stage) % pipe_ranks_;
}

const tp::detail::ParameterCut* PipelineParameters::cut_of_layer(const std::string& layer_name) const {
  const auto found = cuts_.find(layer_name);
  return found == cuts_.end() ? nullptr : &found->second;
}

const tp::detail::ParameterCut* PipelineParameters::cut_of_whole(const std::string& name) const {
  auto found = by_whole_.find(name);
  if (found != by_whole_.end()) return found->second;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || name.compare(dot + 1, std::string::npos, "step") == 0) return nullptr;
  found = by_whole_.find(name.substr(0, dot));
  return found == by_whole_.end() ? nullptr : found->second;
}

std::vector<std::pair<std::string, torch::Tensor>> PipelineParameters::full_parameters(
    const std::vector<std::pair<std::string, torch::Tensor>>& mine, Comm& pipe) const {
  std::map<std::string, torch::Tensor> held(mine.begin(), mine.end());
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const auto& item : layers_->named_parameters(true)) {
    const std::string name = whole_name(item.key());
    if (!seen.insert(name).second) continue;  // a tied weight: its first stage's
    const int owner_rank = owner(item.key());
    const auto own = held.find(name);
    // The owner's: its stage's (gathered from its engine), or a frozen parameter the module keeps whole.
    // Elsewhere the shape is this rank's copy of a tied weight's (its engine may have emptied the
    // module's), else the module's, which no engine here took.
    const torch::Tensor& source = own != held.end() ? own->second : item.value();
    torch::Tensor value = pipe.rank() == owner_rank ? source.detach().to(torch::kCPU, torch::kFloat).clone()
                                                    : torch::empty(source.sizes(), torch::kFloat);
    if (const auto* cut = cut_of_layer(item.key())) value = tp::detail::gather_cut(value, *cut);
    pipe.broadcast(value, owner_rank);
    out.emplace_back(name, value);
  }
  return out;
}

}  // namespace cohort::detail
