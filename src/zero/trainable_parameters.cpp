// The ZeRO engine's trainable parameters (trainable_parameters.h): which they are, and pointing their
// data at a flat group, a gathered unit, or nothing.
#include "zero/trainable_parameters.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "core/check.h"
#include "core/grad_kit.h"

namespace cohort::detail {

TrainableParameters::TrainableParameters(const torch::nn::Module& module, const ShapeMap& sharded_shapes) {
  std::unordered_map<const c10::TensorImpl*, std::string> seen;  // a tied parameter is one parameter
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen: stays whole, never reduced or updated
    auto [first, fresh] = seen.emplace(item.value().unsafeGetTensorImpl(), item.key());
    if (!fresh) {
      tied_.emplace_back(item.key(), first->second);
      continue;
    }
    names_.push_back(item.key());
    params_.push_back(item.value());
    const auto sharded = sharded_shapes.find(item.value().unsafeGetTensorImpl());
    shapes_.push_back(sharded == sharded_shapes.end() ? item.value().sizes().vec() : sharded->second);
  }
  COHORT_CHECK_KIND(kInvalidArgument, !params_.empty(),
                    "cohort::initialize: the model has no parameter that requires grad");
  for (size_t i = 1; i < params_.size(); ++i)
    COHORT_CHECK_KIND(kInvalidArgument, params_[i].device() == params_[0].device(), "ZeRO engine: parameter '",
                      names_[i], "' is on ", params_[i].device(), " but '", names_[0], "' is on ", params_[0].device(),
                      "; all parameters must be on one device");
}

int64_t TrainableParameters::numel(int64_t i) const { return c10::multiply_integers(shapes_[size_t(i)]); }

int64_t TrainableParameters::total_numel() const {
  int64_t total = 0;
  for (const auto& shape : shapes_) total += c10::multiply_integers(shape);
  return total;
}

torch::Tensor TrainableParameters::flatten(const GroupLayout& layout, const torch::TensorOptions& options) const {
  torch::Tensor full = torch::zeros({layout.padded}, options);
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const auto& param = params_[size_t(layout.params[k])];
    full.narrow(0, layout.offsets[k], param.numel()).copy_(param.reshape(-1));
  }
  return full;
}

void TrainableParameters::alias_into(const GroupLayout& layout, const torch::Tensor& flat) {
  for (size_t k = 0; k < layout.params.size(); ++k) {
    auto& param = params_[size_t(layout.params[k])];
    param.set_data(flat_alias(flat, layout.offsets[k], param.sizes()));
  }
}

void TrainableParameters::show_gathered(const GroupLayout& layout, const torch::Tensor& gathered) {
  for (size_t k = 0; k < layout.params.size(); ++k) {
    auto& param = params_[size_t(layout.params[k])];
    const auto& shape = shapes_[size_t(layout.params[k])];
    param.set_data(gathered.narrow(0, layout.offsets[k], c10::multiply_integers(shape)).view(shape));
  }
}

void TrainableParameters::free(const GroupLayout& layout) {
  for (int64_t index : layout.params) {
    auto& param = params_[size_t(index)];
    param.set_data(torch::empty({0}, param.options().requires_grad(false)));
  }
}

// Autograd checks each gradient against the shape and dtype a parameter had when its accumulator
// was made (the engine's gradient hooks): give the emptied parameters their whole shape in the
// compute dtype for that moment, backed by one element (a stride-0 view), not by the memory of the
// whole unit.
void TrainableParameters::show_whole_shapes(const ShapeMap& sharded_shapes) {
  for (auto& param : params_) {
    const auto found = sharded_shapes.find(param.unsafeGetTensorImpl());
    if (found == sharded_shapes.end()) continue;
    param.set_data(torch::zeros({1}, param.options().requires_grad(false)).expand(found->second));
  }
}

}  // namespace cohort::detail
