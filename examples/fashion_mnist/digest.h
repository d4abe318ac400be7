// params-sha256: one SHA-256 over a module's parameters, so two runs can be compared exactly.
// Same seed and world size must give the same digest run after run; any change in data order,
// reduction or initialization changes it.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fashion_mnist {

/// The digest fed one tensor at a time (a sharded model's parameters as they are gathered): each as a
/// contiguous CPU float32 tensor, names and shapes not hashed, only the values.
class ParamsSha256 {
 public:
  ParamsSha256();
  ~ParamsSha256();
  void add(const torch::Tensor& tensor);
  /// Lower-case hex of the digest of everything added (call once, at the end).
  std::string hex();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

/// Lower-case hex SHA-256 of the bytes of every parameter in named_parameters() order.
std::string parameters_sha256(const torch::nn::Module& module);

/// The same digest over named tensors given in order (the ZeRO engine's full_parameters()).
std::string tensors_sha256(const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

}  // namespace fashion_mnist
