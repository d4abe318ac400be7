// The two benchmark models, defined identically in bench/ddp/ddp_step.py: the Fashion-MNIST CNN of
// the main example (compute-bound) and an 8-layer MLP of width 512 (overhead-bound at batch 32).
#pragma once

#include <torch/torch.h>

namespace cohort::bench {

struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1(x));
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Cnn);

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    for (int i = 0; i < 8; ++i)
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(512, i == 7 ? 10 : 512)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i + 1 < layers.size(); ++i) x = torch::relu(layers[i](x));
    return layers.back()(x);
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

}  // namespace cohort::bench
