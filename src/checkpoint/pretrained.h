// cohort::load_pretrained with tensors a rank holds only a part of (tensor parallelism's cuts): for
// such a tensor the runs of the part's elements in the whole tensor are read from the file, so a rank
// reads its part's bytes only (or, without runs, the whole tensor is read and the part cut from it);
// every other tensor is read as load_pretrained reads it (cohort/safetensors.h).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/safetensors.h"
#include "cohort/zero.h"
#include "zero/parameter_state.h"  // PartRun

namespace cohort::detail {

/// A tensor this rank holds a part of: the whole tensor's shape on file, and the part of it this rank keeps.
struct LocalPart {
  std::vector<int64_t> whole_shape;
  std::function<torch::Tensor(const torch::Tensor& whole)> cut;
  /// The runs of the part's elements [begin, end) in the whole tensor, in order: when set, only they
  /// are read (never the whole tensor).
  std::function<std::vector<PartRun>(int64_t begin, int64_t end)> runs;
};
/// By the tensor's name and its shape on this rank: its LocalPart, or nothing when it is whole.
using LocalParts = std::function<std::optional<LocalPart>(const std::string& name, const std::vector<int64_t>& shape)>;

void load_pretrained_parts(torch::nn::Module& module, const std::string& path, const StateDictOptions& options,
                           const LocalParts& parts);
void load_pretrained_parts(ZeroEngineCore& engine, const std::string& path, const StateDictOptions& options,
                           const LocalParts& parts);

}  // namespace cohort::detail
