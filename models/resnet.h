// ResNet-18 as torchvision defines it (BasicBlock x [2, 2, 2, 2], widths 64..512, zero-free BatchNorm
// init left to LibTorch's defaults), with the CIFAR-10 stem variant (3x3 stride-1 conv, no max-pool)
// that small-image benchmarks use. Parameter names follow torchvision's state_dict.
#pragma once

#include <torch/torch.h>

namespace cohort::models {

struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    using torch::nn::Conv2dOptions;
    conv1 = register_module("conv1", torch::nn::Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2 = register_module("conv2", torch::nn::Conv2d(Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample", torch::nn::Sequential(torch::nn::Conv2d(Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                              torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto identity = downsample ? downsample->forward(x) : x;
    auto out = torch::relu(bn1(conv1(x)));
    return torch::relu(bn2(conv2(out)) + identity);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNet18Options {
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// CIFAR stem: conv 3x3 stride 1 and no max-pool (32x32 inputs); else ImageNet's 7x7 stride 2 + pool.
  TORCH_ARG(bool, cifar_stem) = false;
};

struct ResNet18Impl : torch::nn::Module {
  explicit ResNet18Impl(const ResNet18Options& options = {}) : cifar_stem_(options.cifar_stem()) {
    using torch::nn::Conv2dOptions;
    conv1 = register_module("conv1", cifar_stem_ ? torch::nn::Conv2d(Conv2dOptions(3, 64, 3).padding(1).bias(false))
                                                 : torch::nn::Conv2d(Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
    int64_t in = 64;
    const int64_t widths[4] = {64, 128, 256, 512};
    for (int i = 0; i < 4; ++i) {
      torch::nn::Sequential layer;
      layer->push_back(BasicBlock(in, widths[i], i == 0 ? 1 : 2));
      layer->push_back(BasicBlock(widths[i], widths[i], 1));
      layers.push_back(register_module("layer" + std::to_string(i + 1), layer));
      in = widths[i];
    }
    fc = register_module("fc", torch::nn::Linear(512, options.num_classes()));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    if (!cifar_stem_) x = torch::max_pool2d(x, 3, 2, 1);
    for (auto& layer : layers) x = layer->forward(x);
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  bool cifar_stem_;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  std::vector<torch::nn::Sequential> layers;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace cohort::models
