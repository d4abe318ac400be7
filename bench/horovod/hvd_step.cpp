// One process of the hvd negotiation benchmark: trains bench/ddp's MLP or CNN on synthetic data with
// hvd::DistributedOptimizer (SGD with momentum) and rank 0 prints a RESULT line with the median time
// per step after --warmup steps. Whether operations are negotiated by name (the default) or started
// in submission order (COHORT_HVD_ORDERED=1) and the fusion threshold (HOROVOD_FUSION_THRESHOLD) come
// from the environment, as a user sets them; bench/horovod/run.sh runs the modes interleaved.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "../ddp/models.h"
#include "cohort/horovod.h"

namespace {

namespace hvd = cohort::hvd;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model = "mlp";
  int batch = 32, steps = 60, warmup = 10, threads = 1;
};

template <typename Net>
std::vector<double> train(Net net, const Args& args, const torch::Tensor& x, const torch::Tensor& y) {
  hvd::broadcast_parameters(net->named_parameters(), 0);
  auto sgd = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  hvd::DistributedOptimizer optimizer(sgd, net->named_parameters());
  std::vector<double> times;
  for (int step = 0; step < args.warmup + args.steps; ++step) {
    const auto start = Clock::now();
    auto batch = torch::arange(int64_t(step) * args.batch, int64_t(step + 1) * args.batch) % x.size(0);
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x.index({batch})), y.index({batch})).backward();
    optimizer.step();
    if (step >= args.warmup) times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"hvd::DistributedOptimizer step time (bench/horovod/run.sh)"};
  app.add_option("--model", args.model)->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--batch", args.batch);
  app.add_option("--steps", args.steps);
  app.add_option("--warmup", args.warmup);
  app.add_option("--threads", args.threads);
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(args.threads);
  hvd::init();
  torch::manual_seed(1 + hvd::rank());
  const int64_t n = 16 * int64_t(args.batch);
  auto x = args.model == "cnn" ? torch::randn({n, 1, 28, 28}) : torch::randn({n, 512});
  auto y = torch::randint(0, 10, {n}, torch::kLong);
  torch::manual_seed(0);
  auto times = args.model == "cnn" ? train(cohort::bench::Cnn(), args, x, y) : train(cohort::bench::Mlp(), args, x, y);
  std::sort(times.begin(), times.end());
  const char* ordered = std::getenv("COHORT_HVD_ORDERED");
  const char* fusion = std::getenv("HOROVOD_FUSION_THRESHOLD");
  if (hvd::rank() == 0)
    std::printf("RESULT model=%s mode=%s fusion=%s step_ms=%.4f\n", args.model.c_str(),
                ordered && std::string(ordered) == "1" ? "ordered" : "negotiated",
                fusion && std::string(fusion) == "0" ? "off" : "on", times[times.size() / 2]);
  hvd::shutdown();
}
