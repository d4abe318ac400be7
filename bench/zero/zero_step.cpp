// One side of the ZeRO benchmark (bench/zero/run.sh): trains a model for a number of steps with
// cohort's DDP or the ZeRO engine at stage 0-3 (fp32 Adam, synthetic data) and prints samples/s,
// loopback bytes per step (every rank's traffic: the ranks talk over 127.0.0.1) and model-state
// bytes per rank. Run it under cohortrun.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cohort/cohort.h"

namespace {

// The bench/ddp models as Sequentials, which stage 3 needs.
torch::nn::Sequential make_model(const std::string& name) {
  torch::manual_seed(0);
  if (name == "cnn")
    return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)), torch::nn::ReLU(),
                                 torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)), torch::nn::ReLU(),
                                 torch::nn::MaxPool2d(2), torch::nn::Flatten(), torch::nn::Linear(9216, 128),
                                 torch::nn::ReLU(), torch::nn::Linear(128, 10));
  torch::nn::Sequential mlp;
  for (int i = 0; i < 8; ++i) {
    mlp->push_back(torch::nn::Linear(512, i == 7 ? 10 : 512));
    if (i < 7) mlp->push_back(torch::nn::ReLU());
  }
  return mlp;
}

// Bytes sent over the loopback interface so far (/proc/net/dev, "lo:" transmit bytes).
int64_t loopback_bytes() {
  std::ifstream dev("/proc/net/dev");
  std::string line;
  while (std::getline(dev, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos || line.substr(0, colon).find("lo") == std::string::npos) continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t value = 0, tx = 0;
    for (int i = 0; i < 9 && fields >> value; ++i) tx = value;  // field 9: transmit bytes
    return tx;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "ddp", model_name = "mlp";
  int steps = 30, warmup = 5, batch = 32, threads = 1;
  int64_t bucket = 0;  // 0: DeepSpeed's defaults (one 5e8-element bucket, overlap_comm off below stage 3)
  CLI::App app{"ZeRO engine vs DDP, one configuration"};
  app.add_option("--mode", mode)->check(CLI::IsMember({"ddp", "zero0", "zero1", "zero2", "zero3"}));
  app.add_option("--model", model_name)->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--batch", batch);
  app.add_option("--threads", threads);
  app.add_option("--bucket", bucket, "reduce_bucket_size in elements, with overlap_comm on (0: defaults)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);
  auto world = cohort::init();
  auto model = make_model(model_name);
  auto input = model_name == "cnn" ? torch::randn({batch, 1, 28, 28}) : torch::randn({batch, 512});
  auto target = torch::randint(0, 10, {batch}, torch::kLong);
  auto loss_of = [&](const torch::Tensor& out) { return torch::nn::functional::cross_entropy(out, target); };

  std::function<void()> train_step;
  std::unique_ptr<cohort::DistributedDataParallel<torch::nn::SequentialImpl>> ddp;
  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<cohort::ZeroEngine<torch::nn::SequentialImpl>> engine;
  int64_t psi = 0;
  for (auto& p : model->parameters()) psi += p.numel();
  int64_t state_bytes = 16 * psi;  // DDP, fp32 Adam: parameters, gradients, two moments
  if (mode == "ddp") {
    ddp = std::make_unique<cohort::DistributedDataParallel<torch::nn::SequentialImpl>>(model.ptr());
    adam = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    train_step = [&] {
      adam->zero_grad();
      torch::Tensor loss;
      {
        cohort::trace::Span forward("forward");  // the timeline's spans (bench/timeline); free when off
        loss = loss_of((*ddp)->forward(input));
      }
      {
        cohort::trace::Span backward("backward");
        loss.backward();
      }
      cohort::trace::Span optimizer_step("optimizer step");
      adam->step();
    };
  } else {
    auto zero = cohort::ZeroOptimizationConfig().stage(mode.back() - '0').overlap_comm(mode == "zero3");
    if (bucket > 0) zero.reduce_bucket_size(bucket).overlap_comm(true);
    auto config = cohort::ZeroConfig()
                      .zero_optimization(zero)
                      .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(1e-3));
    engine = std::make_unique<cohort::ZeroEngine<torch::nn::SequentialImpl>>(model.ptr(), config,
                                                                             cohort::EngineOptions());
    train_step = [&] {
      torch::Tensor loss;
      {
        cohort::trace::Span forward("forward");
        loss = loss_of(engine->forward(input));
      }
      {
        cohort::trace::Span backward("backward");
        engine->backward(loss);
      }
      cohort::trace::Span optimizer_step("optimizer step");
      engine->step();
    };
  }
  for (int i = 0; i < warmup; ++i) train_step();
  world.comm().barrier();
  const int64_t bytes_before = loopback_bytes();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    cohort::trace::Span step_span("step");
    train_step();
  }
  world.comm().barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t bytes = loopback_bytes() - bytes_before;
  if (engine) state_bytes = engine->memory_report().total();
  if (world.rank() == 0)
    std::printf("RESULT mode=%s%s model=%s ranks=%d samples_per_s=%.1f step_ms=%.2f lo_bytes_per_step=%lld "
                "state_bytes=%lld psi=%lld\n",
                mode.c_str(), bucket > 0 ? "_overlap" : "", model_name.c_str(), world.size(), double(steps) * batch * world.size() / seconds,
                1000 * seconds / steps, static_cast<long long>(bytes / steps), static_cast<long long>(state_bytes),
                static_cast<long long>(psi));
  return 0;
}
