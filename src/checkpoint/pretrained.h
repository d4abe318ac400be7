// cohort::load_pretrained with tensors a rank holds only a part of (tensor parallelism's cuts): for
// such a tensor the whole one is read from the file, one tensor at a time, and the rank's part cut
// from it; every other tensor is read as load_pretrained reads it (cohort/safetensors.h).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/safetensors.h"
#include "cohort/zero.h"

namespace cohort::detail {

/// A tensor this rank holds a part of: the whole tensor's shape on file, and the part of it this rank keeps.
struct LocalPart {
  std::vector<int64_t> whole_shape;
  std::function<torch::Tensor(const torch::Tensor& whole)> cut;
};
/// By the tensor's name and its shape on this rank: its LocalPart, or nothing when it is whole.
using LocalParts = std::function<std::optional<LocalPart>(const std::string& name, const std::vector<int64_t>& shape)>;

void load_pretrained_parts(torch::nn::Module& module, const std::string& path, const StateDictOptions& options,
                           const LocalParts& parts);
void load_pretrained_parts(ZeroEngineCore& engine, const std::string& path, const StateDictOptions& options,
                           const LocalParts& parts);

}  // namespace cohort::detail
