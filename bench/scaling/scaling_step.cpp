// One rank of the scaling study (bench/scaling/run.sh): trains one of the guides' models (models/) on a
// SYNTHETIC CIFAR-shaped batch (cohort::data::synthetic_cifar10; the Fashion-MNIST CNN on random 28x28
// images) with DDP, ZeRO stage 1 or 2, or alone (no communication: the ceiling), SGD with momentum, and
// rank 0 prints a RESULT line: samples/s over all ranks, step time and, for DDP, the time backward
// waited for gradient buckets (communication not hidden behind compute).
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "cohort/cifar.h"
#include "cohort/cohort.h"
#include "models/fashion_mnist_net.h"
#include "models/resnet.h"
#include "models/vit.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model = "resnet18", mode = "ddp", comm_hook = "none";
  int batch = 32, steps = 20, warmup = 3, threads = 1, powersgd_rank = 1;
  double bucket_cap_mb = 25.0;
};

std::shared_ptr<torch::nn::Module> make_model(const std::string& name) {
  torch::manual_seed(0);
  if (name == "resnet18") return cohort::models::ResNet18(cohort::models::ResNet18Options().num_classes(10).cifar_stem(true)).ptr();
  if (name == "vit") return cohort::models::ViT().ptr();
  return fashion_mnist::Net().ptr();
}

torch::Tensor forward(const std::string& name, torch::nn::Module& model, const torch::Tensor& x) {
  if (name == "resnet18") return static_cast<cohort::models::ResNet18Impl&>(model).forward(x);
  if (name == "vit") return static_cast<cohort::models::ViTImpl&>(model).forward(x);
  return static_cast<fashion_mnist::NetImpl&>(model).forward(x);
}

cohort::ZeroConfig zero_config(int stage, int world) {
  return cohort::ZeroConfig().world_size(world).zero_optimization(
      cohort::ZeroOptimizationConfig().stage(stage).overlap_comm(stage >= 2)).optimizer(
      cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.01).momentum(0.9));
}

int run(const Args& args, const cohort::World& world) {
  auto model = make_model(args.model);
  const int size = args.mode == "alone" ? 1 : world.size();
  auto data = cohort::data::synthetic_cifar10(args.batch, uint64_t(world.rank()));
  auto x = args.model == "cnn" ? torch::randn({args.batch, 1, 28, 28}) : data.images;
  auto y = data.labels;
  std::unique_ptr<cohort::DistributedDataParallel<torch::nn::Module>> ddp;
  std::unique_ptr<cohort::ZeroEngine<torch::nn::Module>> zero;
  std::unique_ptr<torch::optim::SGD> opt;
  if (args.mode == "ddp") {
    ddp = std::make_unique<cohort::DistributedDataParallel<torch::nn::Module>>(
        model, cohort::DDPOptions().bucket_cap_mb(args.bucket_cap_mb));
    // As the .py twin: PowerSGD compresses from step 2 (the warm-up's), error feedback and warm start on.
    if (args.comm_hook == "powersgd")
      ddp->register_comm_hook(cohort::comm_hooks::powersgd(
          cohort::PowerSGDOptions().matrix_approximation_rank(args.powersgd_rank).start_iteration(2)));
  }
  if (args.mode.rfind("zero", 0) == 0)
    zero = std::make_unique<cohort::ZeroEngine<torch::nn::Module>>(model, zero_config(args.mode.back() - '0', size),
                                                                    cohort::EngineOptions());
  else
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  double wait = 0;
  Clock::time_point start;
  for (int step = 0; step < args.warmup + args.steps; ++step) {
    if (step == args.warmup) {
      if (size > 1) world.comm().barrier();
      start = Clock::now();
      wait = 0;
    }
    auto loss = torch::nn::functional::cross_entropy(forward(args.model, *model, x), y);
    if (zero) {
      zero->backward(loss);
      zero->step();
      continue;
    }
    opt->zero_grad();
    loss.backward();
    if (ddp) wait += ddp->last_wait_seconds();
    opt->step();
  }
  if (size > 1) world.comm().barrier();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (world.rank() == 0 || args.mode == "alone")
    std::printf("RESULT impl=cohort_%s model=%s ranks=%d batch=%d threads=%d samples_per_s=%.1f step_ms=%.2f wait_ms=%.3f "
                "hook=%s data=synthetic\n", args.mode.c_str(), args.model.c_str(), world.size(), args.batch, args.threads,
                double(args.steps) * args.batch * size / elapsed, 1000 * elapsed / args.steps, 1000 * wait / args.steps,
                args.comm_hook.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Scaling-study step benchmark (one rank; launch with cohortrun)"};
  app.add_option("--model", args.model, "resnet18, vit or cnn")->check(CLI::IsMember({"resnet18", "vit", "cnn"}));
  app.add_option("--mode", args.mode, "ddp, zero1, zero2 or alone (no communication)")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "alone"}));
  app.add_option("--batch", args.batch, "batch per rank");
  app.add_option("--steps", args.steps, "timed steps");
  app.add_option("--warmup", args.warmup, "untimed steps first");
  app.add_option("--threads", args.threads, "torch threads per rank");
  app.add_option("--comm-hook", args.comm_hook, "DDP communication hook: none or powersgd")
      ->check(CLI::IsMember({"none", "powersgd"}));
  app.add_option("--powersgd-rank", args.powersgd_rank, "PowerSGD's matrix approximation rank")->check(CLI::PositiveNumber);
  app.add_option("--bucket-cap-mb", args.bucket_cap_mb, "DDP's bucket size after the first, in MiB")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (args.comm_hook == "powersgd" && (args.mode != "ddp" || args.warmup < 2)) {
    std::fprintf(stderr, "error: --comm-hook powersgd needs --mode ddp and --warmup 2 or more (it compresses from step 2)\n");
    return 2;
  }
  torch::set_num_threads(args.threads);
  try {
    return run(args, cohort::init());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
