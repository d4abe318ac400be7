// The Fashion-MNIST network (see model.h): registration order fixes named_parameters() order, which
// both DDP's buckets and the params-sha256 digest depend on.
#include "model.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace fashion_mnist {

namespace F = torch::nn::functional;

NetImpl::NetImpl()
    : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
      conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
      fc1_(register_module("fc1", torch::nn::Linear(64 * 12 * 12, 128))),
      fc2_(register_module("fc2", torch::nn::Linear(128, 10))) {}

torch::Tensor NetImpl::forward(const torch::Tensor& images) {
  auto x = F::relu(conv1_->forward(images));
  x = F::relu(conv2_->forward(x));
  x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
  x = F::relu(fc1_->forward(x.flatten(1)));
  return fc2_->forward(x);
}

}  // namespace fashion_mnist
