// The ZeRO engine's trainable parameters: each tensor once (a tied parameter is one parameter), in
// module order, with its name and whole shape, and what its data points at now. At stage 0-2 that is
// its slice of a flat group (state_store.h); at stage 3 no memory between uses and a view of the
// gathered unit while it runs (unit_coordinator.h). Frozen parameters are not here: they stay whole
// and are never reduced or updated.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zero/partition.h"

namespace cohort::detail {

class TrainableParameters {
 public:
  /// Whole shapes of parameters sharded when their unit was made (cohort::ShardedInit), by tensor.
  using ShapeMap = std::unordered_map<const c10::TensorImpl*, std::vector<int64_t>>;

  /// The parameters of `module` that require grad; `sharded_shapes` gives the whole shape of those
  /// already sharded. Throws kInvalidArgument when there is none, or when they span devices.
  TrainableParameters(const torch::nn::Module& module, const ShapeMap& sharded_shapes);

  int64_t size() const { return int64_t(params_.size()); }
  torch::Tensor& at(int64_t i) { return params_[size_t(i)]; }
  const torch::Tensor& at(int64_t i) const { return params_[size_t(i)]; }
  const std::vector<torch::Tensor>& tensors() const { return params_; }
  const std::string& name(int64_t i) const { return names_[size_t(i)]; }
  const std::vector<std::string>& names() const { return names_; }
  /// The whole shape (stage 3 parameters are empty between uses) and its element count.
  const std::vector<int64_t>& shape(int64_t i) const { return shapes_[size_t(i)]; }
  int64_t numel(int64_t i) const;
  /// Elements of every parameter, whole shapes (the model's size).
  int64_t total_numel() const;
  /// (name, the name it shares a tensor with) of each tied parameter seen after its first name.
  const std::vector<std::pair<std::string, std::string>>& tied() const { return tied_; }

  /// A new [padded] tensor of `layout`'s parameters back to back, the padding zero.
  torch::Tensor flatten(const GroupLayout& layout, const torch::TensorOptions& options) const;
  /// Points each parameter of `layout` at its slice of `flat` (stage 0-2: they live in the group).
  void alias_into(const GroupLayout& layout, const torch::Tensor& flat);
  /// Points each parameter of `layout` at its slice of the gathered [padded] `gathered`, whole shape.
  void show_gathered(const GroupLayout& layout, const torch::Tensor& gathered);
  /// Empties the parameters of `layout`; each keeps its TensorImpl (autograd saved it by reference).
  void free(const GroupLayout& layout);
  /// The parameters in `sharded_shapes` in their whole shape, over one element (see the .cpp).
  void show_whole_shapes(const ShapeMap& sharded_shapes);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::string>> tied_;
  std::vector<std::vector<int64_t>> shapes_;
};

}  // namespace cohort::detail
