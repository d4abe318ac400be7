// Strategy "pipeline"'s view of the layers it cut, by name: each layer parameter's name in the module
// (TrainingModule::PipelineLayers::names, or a network's own "3.weight"), the pipeline rank whose stage
// trains it, and its tensor-parallel cut (known on every rank: each builds the whole model), for
// checkpoints and for the whole parameters an export or a digest reads.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cohort/comm.h"
#include "cohort/pipeline.h"
#include "tp/parameter_cuts.h"

namespace cohort::detail {

class PipelineParameters {
 public:
  /// Before any ZeRO engine takes the parameters (the cuts read them). `bounds`: the partition's.
  PipelineParameters(torch::nn::Sequential layers, pipeline::ParameterNames names, std::vector<int64_t> bounds,
                     int pipe_ranks);

  const pipeline::ParameterNames& names() const { return names_; }
  std::string whole_name(const std::string& layer_name) const { return names_ ? names_(layer_name) : layer_name; }
  /// The rank of the pipeline group whose stage holds layer parameter `layer_name` ("4.h.2.ln_1.weight").
  int owner(const std::string& layer_name) const;
  /// A layer parameter's cut by its layer name; null when it is whole.
  const tp::detail::ParameterCut* cut_of_layer(const std::string& layer_name) const;
  /// The same by its name in the module, or by "<that name>.<optimizer state field>" (".step" is whole).
  const tp::detail::ParameterCut* cut_of_whole(const std::string& name) const;
  bool any_cut() const { return !cuts_.empty(); }

  /// Every parameter whole (frozen ones too), in float32 on the CPU, under its name in the module, once
  /// (a tied one from its first stage): gathered over the tp group when cut, then broadcast over `pipe` from
  /// its owner; `mine` holds this rank's stages' (Pipeline::full_parameters). All ranks call it.
  std::vector<std::pair<std::string, torch::Tensor>> full_parameters(
      const std::vector<std::pair<std::string, torch::Tensor>>& mine, Comm& pipe) const;

 private:
  torch::nn::Sequential layers_;
  pipeline::ParameterNames names_;
  std::vector<int64_t> bounds_;
  int pipe_ranks_;
  std::map<std::string, tp::detail::ParameterCut> cuts_;             // by layer name
  std::map<std::string, const tp::detail::ParameterCut*> by_whole_;  // by the module's name
};

}  // namespace cohort::detail
