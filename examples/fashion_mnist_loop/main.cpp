// fashion_mnist_loop: the Fashion-MNIST job written by hand with cohort's low-level API, for those who
// want the loop in their own code: cohort::init, DistributedDataParallel, DistributedSampler, Adam,
// an exact evaluation over all ranks (reduce_metrics) and the params-sha256 digest. Run it under a
// launcher: `cohortrun --standalone --nproc-per-node 2 build/examples/fashion_mnist_loop --epochs 1`.
// With the same flags it prints the same params-sha256 as examples/fashion_mnist (on the Trainer).
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>

#include "../common/cli_main.h"
#include "../common/cli_numbers.h"
#include "../fashion_mnist/digest.h"
#include "models/fashion_mnist_net.h"

namespace {

struct Flags {
  int epochs = 2;
  int64_t batch_size = 64;
  double lr = 1e-3;
  int64_t seed = 0;
  std::string data = cohort::data::kFashionMnistDir;
};

// Correct predictions and samples of this rank's exact share of the test set.
std::pair<int64_t, int64_t> evaluate(fashion_mnist::Net& net, const cohort::data::FashionMnist& test,
                                     int64_t batch_size, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  net->eval();
  cohort::DistributedSampler sampler(test.images.size(0), cohort::SamplerOptions().shuffle(false).exact_split(true));
  int64_t correct = 0, seen = 0;
  for (const auto& batch : sampler.batch_tensors(batch_size)) {
    auto logits = net->forward(test.images.index_select(0, batch).to(device));
    correct += logits.argmax(1).eq(test.labels.index_select(0, batch).to(device)).sum().item<int64_t>();
    seen += batch.numel();
  }
  net->train();
  return {correct, seen};
}

void train(const Flags& flags) {
  const cohort::World world = cohort::init();
  const auto train_set = cohort::data::load_fashion_mnist(flags.data, cohort::data::Split::kTrain);
  const auto test_set = cohort::data::load_fashion_mnist(flags.data, cohort::data::Split::kTest);
  torch::manual_seed(flags.seed);  // the seed alone fixes the initial weights
  fashion_mnist::Net net;
  net->to(world.device());
  cohort::DistributedDataParallel ddp(net);  // broadcasts rank 0's weights
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(flags.lr));
  cohort::DistributedSampler sampler(train_set.images.size(0), cohort::SamplerOptions().shuffle(true).seed(flags.seed));
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    sampler.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
    double loss_sum = 0;
    int64_t samples = 0;
    for (const auto& batch : sampler.batch_tensors(flags.batch_size)) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(ddp(train_set.images.index_select(0, batch).to(world.device())),
                                                       train_set.labels.index_select(0, batch).to(world.device()));
      loss.backward();  // DDP averages the gradients over ranks while backward runs
      optimizer.step();
      loss_sum += loss.item<double>() * batch.numel();
      samples += batch.numel();
    }
    const auto [correct, seen] = evaluate(net, test_set, flags.batch_size, world.device());
    const auto sums = cohort::reduce_metrics({torch::tensor(loss_sum, torch::kFloat64), torch::tensor(samples),
                                              torch::tensor(correct), torch::tensor(seen)});
    if (world.is_main())
      std::printf("epoch %d/%d: train loss %.4f, test accuracy %.2f%% (%lld/%lld)\n", epoch + 1, flags.epochs,
                  sums[0].item<double>() / sums[1].item<int64_t>(),
                  100.0 * sums[2].item<int64_t>() / sums[3].item<int64_t>(),
                  static_cast<long long>(sums[2].item<int64_t>()), static_cast<long long>(sums[3].item<int64_t>()));
  }
  if (world.is_main()) std::printf("params-sha256: %s\n", fashion_mnist::parameters_sha256(*net).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Trains the Fashion-MNIST CNN with a hand-written DDP loop; run it under a launcher for several ranks."};
  // fashion_mnist's ranges and parser, so a value one example takes the other takes too.
  examples::add_integer(app, {"--epochs", 1, 100000}, flags.epochs, "Passes over the training set");
  examples::add_integer(app, {"--batch-size", 1, 1 << 20}, flags.batch_size, "Samples per step on each rank");
  examples::add_real(app, {"--lr", 1e-12, 1000}, flags.lr, "Learning rate of Adam");
  examples::add_integer(app, {"--seed", 0, (int64_t(1) << 53) - 1}, flags.seed,
                        "Seed of the initial weights and of the shuffle (at most 2^53 - 1, as fashion_mnist)");
  app.add_option("--data", flags.data, "Directory of the four Fashion-MNIST IDX files")->capture_default_str();
  return examples::parse_and_run(app, argc, argv, [&] { train(flags); });
}
