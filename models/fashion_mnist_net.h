// The Fashion-MNIST classifier: PyTorch's classic MNIST example network (two 3x3 convolutions,
// max-pool, two fully connected layers) without its dropout: conv 32, conv 64, fc 128, fc 10 with
// ReLU. Input [N, 1, 28, 28] normalized images, output [N, 10] logits. The example trains it and
// cohort-plan counts it (`--model fashion_mnist_cnn`). Registration order fixes named_parameters()
// order, which both DDP's buckets and the example's params-sha256 digest depend on.
#pragma once

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace fashion_mnist {

class NetImpl : public torch::nn::Module {
 public:
  NetImpl()
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        fc1_(register_module("fc1", torch::nn::Linear(64 * 12 * 12, 128))),
        fc2_(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(const torch::Tensor& images) {
    namespace F = torch::nn::functional;
    auto x = F::relu(conv1_->forward(images));
    x = F::relu(conv2_->forward(x));
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
    x = F::relu(fc1_->forward(x.flatten(1)));
    return fc2_->forward(x);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr};  // 1 -> 32 channels, 3x3: 28x28 -> 26x26
  torch::nn::Conv2d conv2_{nullptr};  // 32 -> 64 channels, 3x3: 26x26 -> 24x24, pooled to 12x12
  torch::nn::Linear fc1_{nullptr};    // 64 * 12 * 12 = 9216 -> 128
  torch::nn::Linear fc2_{nullptr};    // 128 -> 10 classes
};
TORCH_MODULE(Net);

}  // namespace fashion_mnist
