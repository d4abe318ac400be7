// The Fashion-MNIST classifier: PyTorch's classic MNIST example network (two 3x3 convolutions,
// max-pool, two fully connected layers) without its dropout: conv 32, conv 64, fc 128, fc 10 with
// ReLU. Input [N, 1, 28, 28] normalized images, output [N, 10] logits.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace fashion_mnist {

class NetImpl : public torch::nn::Module {
 public:
  NetImpl();
  torch::Tensor forward(const torch::Tensor& images);

 private:
  torch::nn::Conv2d conv1_{nullptr};  // 1 -> 32 channels, 3x3: 28x28 -> 26x26
  torch::nn::Conv2d conv2_{nullptr};  // 32 -> 64 channels, 3x3: 26x26 -> 24x24, pooled to 12x12
  torch::nn::Linear fc1_{nullptr};    // 64 * 12 * 12 = 9216 -> 128
  torch::nn::Linear fc2_{nullptr};    // 128 -> 10 classes
};
TORCH_MODULE(Net);

}  // namespace fashion_mnist
