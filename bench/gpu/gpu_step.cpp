// One training step on a GPU (or the CPU), C++ against PyTorch's eager Python (bench/gpu/gpu_step.py,
// the same model, batch, optimizer and timing): the example's FashionCNN and ResNet-18 (CIFAR stem).
// --mode plain runs the bare loop; --mode ddp wraps the model in cohort's DDP on a world of one (its
// overhead when there is nothing to reduce). Prints one RESULT line: samples/s and ms per step.
#include <CLI/CLI.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "bench/ddp/models.h"
#include "cohort/cohort.h"
#include "models/resnet.h"

namespace {

struct Args {
  std::string model = "cnn", mode = "plain", device = "cuda";
  int batch = 128, steps = 50, warmup = 10;
};

void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Seconds for args.steps timed steps of `net` (after args.warmup), optionally wrapped in cohort's DDP.
template <typename Holder>
double time_steps(Holder net, const Args& args, const torch::Device& device) {
  net->to(device);
  std::optional<cohort::DistributedDataParallel<typename Holder::ContainedType>> ddp;
  if (args.mode == "ddp") {
    cohort::init();
    ddp.emplace(net);
  }
  const bool cnn = args.model == "cnn";
  auto x = cnn ? torch::randn({args.batch, 1, 28, 28}, device) : torch::randn({args.batch, 3, 32, 32}, device);
  auto y = torch::randint(0, 10, {args.batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::chrono::steady_clock::time_point start;
  for (int step = 0; step < args.warmup + args.steps; ++step) {
    if (step == args.warmup) {
      sync(device);
      start = std::chrono::steady_clock::now();
    }
    opt.zero_grad();
    auto out = ddp ? (*ddp)->forward(x) : net->forward(x);
    torch::nn::functional::cross_entropy(out, y).backward();
    opt.step();
  }
  sync(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"cohort GPU step benchmark"};
  app.add_option("--model", args.model)->check(CLI::IsMember({"cnn", "resnet18"}));
  app.add_option("--mode", args.mode)->check(CLI::IsMember({"plain", "ddp"}));
  app.add_option("--device", args.device)->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--batch", args.batch)->check(CLI::Range(1, 1 << 16));
  app.add_option("--steps", args.steps)->check(CLI::Range(1, 1 << 20));
  app.add_option("--warmup", args.warmup)->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  const torch::Device device(args.device == "cuda" ? torch::kCUDA : torch::kCPU);
  torch::manual_seed(0);
  const double seconds =
      args.model == "resnet18"
          ? time_steps(cohort::models::ResNet18(cohort::models::ResNet18Options().num_classes(10).cifar_stem(true)),
                       args, device)
          : time_steps(cohort::bench::Cnn(), args, device);
  std::printf("RESULT impl=cohort_%s model=%s device=%s batch=%d samples_per_s=%.1f ms_per_step=%.3f torch=%s\n",
              args.mode.c_str(), args.model.c_str(), args.device.c_str(), args.batch,
              args.batch * args.steps / seconds, 1000 * seconds / args.steps, TORCH_VERSION);
  return 0;
}
