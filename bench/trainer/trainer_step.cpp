// One process of the Trainer overhead benchmark: trains bench/ddp's CNN or MLP (as a Sequential) on
// synthetic data either with cohort::Trainer (--mode trainer) or with the loop a user writes by hand
// (--mode loop: sampler, batches from the same TensorDataset, zero_grad, forward, loss, backward, step,
// under cohort::DistributedDataParallel when there are 2 ranks), and rank 0 prints a RESULT line with
// the time per optimizer step after --warmup steps. bench/trainer/run.sh runs both, interleaved.
// The Trainer runs as a user runs it: its progress bar (lines, not a terminal), a CSVLogger, a
// training_step that logs its loss each step; only checkpointing is off (I/O, not per-step work).
#include <CLI/CLI.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cohort/cohort.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model = "cnn", mode = "trainer", strategy = "ddp";
  int batch = 64, steps = 40, warmup = 10, threads = 1;
};

torch::nn::Sequential make_network(const std::string& model) {
  torch::manual_seed(0);
  torch::nn::Sequential net;
  if (model == "cnn") {  // bench/ddp/models.h's Cnn: the Fashion-MNIST example's network
    net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::MaxPool2d(2));
    net->push_back(torch::nn::Flatten());
    net->push_back(torch::nn::Linear(9216, 128));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Linear(128, 10));
    return net;
  }
  for (int i = 0; i < 8; ++i) {  // bench/ddp/models.h's Mlp: 8 layers of width 512
    net->push_back(torch::nn::Linear(512, i == 7 ? 10 : 512));
    if (i < 7) net->push_back(torch::nn::ReLU());
  }
  return net;
}

std::shared_ptr<cohort::TensorDataset> make_data(const Args& args, int ranks) {
  torch::manual_seed(1);
  const int64_t n = int64_t(args.warmup + args.steps) * args.batch * ranks;
  auto x = args.model == "cnn" ? torch::randn({n, 1, 28, 28}) : torch::randn({n, 512});
  return std::make_shared<cohort::TensorDataset>(x, torch::randint(0, 10, {n}, torch::kLong));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters) {
  return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.01).momentum(0.9));
}

struct BenchModule : cohort::TrainingModule {
  explicit BenchModule(const std::string& model) : TrainingModule(make_network(model)) {}
  torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
    log("train_loss", loss, cohort::LogOptions().prog_bar(true));
    return loss;
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> p) override {
    return make_optimizer(std::move(p));
  }
};

// Starts the clock after the warmup steps (all ranks at the same step) and stops it after the last.
struct StepClock : cohort::Callback {
  explicit StepClock(int warmup) : warmup_(warmup) {}
  void on_train_batch_end(cohort::Trainer& trainer, cohort::TrainingModule&, int64_t) override {
    if (trainer.global_step() == warmup_) start = Clock::now();
    end = Clock::now();
  }
  int64_t warmup_;
  Clock::time_point start, end;
};

double with_trainer(const Args& args) {
  const std::string root = std::filesystem::temp_directory_path() / ("trainer_bench_" + std::to_string(::getpid()));
  cohort::Trainer trainer(cohort::TrainerOptions().strategy(args.strategy).accelerator("cpu")
                              .max_steps(args.warmup + args.steps).enable_checkpointing(false).default_root_dir(root));
  auto clock = std::make_shared<StepClock>(args.warmup);
  trainer.add_callback(clock);
  BenchModule module(args.model);
  cohort::DataLoader data(make_data(args, trainer.world().size()), cohort::LoaderOptions().batch_size(args.batch).shuffle(true));
  trainer.fit(module, data);
  std::filesystem::remove_all(root);
  return std::chrono::duration<double>(clock->end - clock->start).count();
}

double by_hand(const Args& args, const cohort::World& world) {
  auto net = make_network(args.model);
  auto data = make_data(args, world.size());
  std::unique_ptr<cohort::DistributedDataParallel<torch::nn::SequentialImpl>> ddp;
  if (args.strategy == "ddp") ddp = std::make_unique<cohort::DistributedDataParallel<torch::nn::SequentialImpl>>(net.ptr());
  auto optimizer = make_optimizer(net->parameters());
  cohort::DistributedSampler sampler(data->size(), cohort::SamplerOptions().shuffle(true).seed(0));
  sampler.set_epoch(0);
  Clock::time_point start;
  int step = 0;
  for (const auto& indices : sampler.batch_tensors(args.batch)) {
    const cohort::Batch batch = data->get_batch(indices);
    optimizer->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(ddp ? (*ddp)(batch.data) : net->forward(batch.data), batch.target);
    loss.backward();
    optimizer->step();
    if (++step == args.warmup) start = Clock::now();
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Trainer overhead benchmark: cohort::Trainer or the hand-written loop (launch with cohortrun)"};
  app.add_option("--model", args.model, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}));
  app.add_option("--mode", args.mode, "trainer or loop")->check(CLI::IsMember({"trainer", "loop"}));
  app.add_option("--strategy", args.strategy, "ddp or single")->check(CLI::IsMember({"ddp", "single"}));
  app.add_option("--batch", args.batch, "batch per rank");
  app.add_option("--steps", args.steps, "timed steps");
  app.add_option("--warmup", args.warmup, "untimed steps first");
  app.add_option("--threads", args.threads, "torch threads per rank");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(args.threads);
  try {
    double seconds = 0;
    int ranks = 1, rank = 0;
    if (args.mode == "trainer") {
      seconds = with_trainer(args);
      ranks = cohort::current_world().size();
      rank = cohort::current_world().rank();
    } else {
      auto world = cohort::init();
      seconds = by_hand(args, world);
      ranks = world.size();
      rank = world.rank();
    }
    if (rank == 0)
      std::printf("RESULT impl=%s model=%s strategy=%s ranks=%d batch=%d step_ms=%.3f samples_per_s=%.1f\n",
                  args.mode.c_str(), args.model.c_str(), args.strategy.c_str(), ranks, args.batch,
                  1000 * seconds / args.steps, double(args.steps) * args.batch * ranks / seconds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
