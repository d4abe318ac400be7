// Where parallelize_module cut each parameter (cohort/tensor_parallel.h), for what must see the whole
// tensors again: a checkpoint saves them whole (so any tp size resumes it), full_parameters() gathers
// them, and a load cuts this rank's part again.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <memory>
#include <string>

#include "cohort/comm.h"

namespace cohort::tp::detail {

/// A parameter cut along `dim` into `fused` equal parts, each split over `comm`'s ranks as torch.chunk
/// splits (shard_range); `whole` is that dimension's size before the cut.
struct ParameterCut {
  int64_t dim = 0;
  int64_t fused = 1;
  int64_t whole = 0;
  std::shared_ptr<Comm> comm;
};

/// The parameters of `module` a plan cut, by their names in module.named_parameters() (a Rowwise
/// Linear's bias and a SequenceParallel module's parameters are whole, so absent).
std::map<std::string, ParameterCut> parameter_cuts(torch::nn::Module& module);

/// This rank's part of `whole` (a parameter or a state of its shape, whole along cut.dim).
torch::Tensor cut_of(const torch::Tensor& whole, const ParameterCut& cut);

/// The whole tensor of this rank's part `local`, the same on every rank of cut.comm (collective; no
/// autograd history).
torch::Tensor gather_cut(const torch::Tensor& local, const ParameterCut& cut);

}  // namespace cohort::tp::detail
