// The GPT example's loop on cohort's strategies: ddp (cohort::DistributedDataParallel and AdamW),
// zero1/zero2/zero3/fsdp (cohort::initialize, the ZeRO engine, with the same AdamW on each rank's
// shard; at stage 3 each GPT block is a sharding unit, so zero3 and fsdp are the same for this model).
// The workers are started by cohort::Trainer's self-launch (--devices N) or by a launcher. Every rank
// draws the same global batch of windows each step and takes its rows, so the strategies see the
// same data and, in fp32 without dropout, reach the same parameters.
#include "train.h"

#include <ATen/CPUGeneratorImpl.h>
#include <cohort/cohort.h>
#include <cohort/safetensors.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "../fashion_mnist/digest.h"
#include "models/gpt.h"

namespace gpt_example {
namespace {

using cohort::models::GPT;
using cohort::models::GPTConfig;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// One strategy: the training forward, the backward and optimizer step, an evaluation forward and the
// full parameters (a collective at stage 3).
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  virtual void backward_and_step(const torch::Tensor& loss) = 0;
  virtual NamedTensors full_parameters() = 0;
};

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<torch::Tensor> parameters, const Flags& flags) {
  return std::make_unique<torch::optim::AdamW>(
      std::move(parameters), torch::optim::AdamWOptions(flags.lr).betas({0.9, 0.99}).weight_decay(flags.weight_decay));
}

class DdpStrategy : public Strategy {
 public:
  DdpStrategy(GPT model, const Flags& flags) : model_(model), ddp_(model), optimizer_(adamw(model->parameters(), flags)) {}
  torch::Tensor forward(const torch::Tensor& x) override { return ddp_(x); }
  void backward_and_step(const torch::Tensor& loss) override {
    optimizer_->zero_grad();
    loss.backward();  // the buckets' allreduces overlap backward
    optimizer_->step();
  }
  NamedTensors full_parameters() override {
    NamedTensors out;
    for (const auto& item : model_->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }

 private:
  GPT model_;
  cohort::DistributedDataParallel<cohort::models::GPTImpl> ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(GPT model, int stage, int world_size, const Flags& flags)
      : engine_(cohort::initialize(
            cohort::ZeroConfig().world_size(world_size).zero_optimization(
                cohort::ZeroOptimizationConfig().stage(stage).overlap_comm(true)),
            model,
            cohort::EngineOptions().optimizer_factory(
                [flags](std::vector<torch::Tensor> shards) { return adamw(std::move(shards), flags); }))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return engine_.forward(x); }
  void backward_and_step(const torch::Tensor& loss) override {
    engine_.backward(loss);  // stage 2/3: gradients reduce-scattered as backward runs
    engine_.step();
  }
  NamedTensors full_parameters() override { return engine_.full_parameters(); }

 private:
  cohort::ZeroEngine<cohort::models::GPTImpl> engine_;
};

std::unique_ptr<Strategy> make_strategy(const Flags& flags, GPT model, const cohort::World& world) {
  if (flags.strategy == "ddp") return std::make_unique<DdpStrategy>(model, flags);
  const int stage = flags.strategy == "fsdp" ? 3 : flags.strategy.back() - '0';
  return std::make_unique<ZeroStrategy>(model, stage, world.size(), flags);
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape(-1));
}

// This rank's rows of step `step`'s global batch: batch_size x world windows drawn from `seed` and
// the step alone, the same on every rank whatever the strategy.
std::pair<torch::Tensor, torch::Tensor> train_batch(const Text& text, const Flags& flags, int64_t step,
                                                    const cohort::World& world) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(flags.seed * 1000003 + step));
  const int64_t global = flags.batch_size * world.size();
  auto starts = torch::randint(text.train.numel() - flags.block_size - 1, {global}, generator, torch::kLong);
  return windows(text.train, starts.narrow(0, world.rank() * flags.batch_size, flags.batch_size), flags.block_size);
}

// The mean loss over eval_iters x batch_size x world fixed validation windows (evenly spaced), each
// rank computing its share.
double validation_loss(Strategy& strategy, GPT& model, const Text& text, const Flags& flags, const cohort::World& world) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t count = flags.eval_iters * flags.batch_size * world.size();
  const int64_t span = text.val.numel() - flags.block_size - 1;
  auto starts = torch::linspace(0, static_cast<double>(span), count, torch::kFloat64).to(torch::kLong);
  double sum = 0;
  for (int64_t i = 0; i < flags.eval_iters; ++i) {
    const int64_t first = (i * world.size() + world.rank()) * flags.batch_size;
    auto [x, y] = windows(text.val, starts.narrow(0, first, flags.batch_size), flags.block_size);
    sum += loss_of(strategy.forward(x.to(world.device())), y.to(world.device())).item<double>();
  }
  model->train();
  const auto total = cohort::reduce_metrics({torch::tensor(sum, torch::kFloat64)});
  return total[0].item<double>() / static_cast<double>(flags.eval_iters * world.size());
}

// A few lines of text from rank 0's copy of the trained weights (every rank takes part in gathering).
void print_sample(const NamedTensors& parameters, const GPTConfig& config, const Text& text, const Flags& flags,
                  const cohort::World& world) {
  if (!world.is_main() || flags.sample_tokens == 0) return;
  GPT copy(GPTConfig(config).dropout(0.0));
  std::map<std::string, torch::Tensor> by_name(parameters.begin(), parameters.end());
  cohort::load_state_dict(*copy, by_name);
  copy->eval();
  torch::manual_seed(static_cast<uint64_t>(flags.seed));
  auto start = torch::full({1, 1}, text.token_of[static_cast<unsigned char>('\n')] >= 0
                                       ? text.token_of[static_cast<unsigned char>('\n')] : 0, torch::kLong);
  auto tokens = copy->generate(start, flags.sample_tokens, 0.8, 0);
  std::printf("sample:\n%s\n", decode(text, tokens.narrow(1, 1, flags.sample_tokens)).c_str());
}

}  // namespace

void run_training(const Flags& flags) {
  // The Trainer's self-launch starts --devices - 1 more local workers (none under a launcher) and
  // joins the world; the loop below is this example's own.
  cohort::Trainer launcher(cohort::TrainerOptions().devices(flags.devices).accelerator("cpu").logger(false)
                               .enable_checkpointing(false).enable_progress_bar(false));
  const cohort::World& world = launcher.world();
  const int64_t threads = flags.threads > 0 ? flags.threads
      : std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / world.local_size());
  torch::set_num_threads(static_cast<int>(threads));
  const Text text = load_text(flags.data, flags.block_size + 2);
  const GPTConfig config = GPTConfig().n_layer(flags.n_layer).n_head(flags.n_head).n_embd(flags.n_embd)
      .block_size(flags.block_size).vocab_size(static_cast<int64_t>(text.vocabulary.size())).dropout(flags.dropout)
      .bias(flags.bias).unit(cohort::UnitOptions().reshard_after_forward(!flags.keep_gathered)
                                 .activation_checkpointing(flags.activation_checkpointing));
  torch::manual_seed(static_cast<uint64_t>(flags.seed));  // the seed alone fixes the initial weights
  GPT model(config);
  if (world.is_main())
    std::printf("text: %s, %d files, %lld bytes, vocabulary %zu; GPT %lld parameters; %s on %d ranks, %lld threads each\n",
                flags.data.c_str(), text.files, static_cast<long long>(text.bytes.size()), text.vocabulary.size(),
                static_cast<long long>(cohort::models::gpt_num_parameters(config)), flags.strategy.c_str(),
                world.size(), static_cast<long long>(threads));
  auto strategy = make_strategy(flags, model, world);
  for (int64_t step = 1; step <= flags.max_steps; ++step) {
    auto [x, y] = train_batch(text, flags, step, world);
    auto loss = loss_of(strategy->forward(x.to(world.device())), y.to(world.device()));
    strategy->backward_and_step(loss);
    if (step % flags.eval_interval == 0 || step == flags.max_steps) {
      const double val = validation_loss(*strategy, model, text, flags, world);
      if (world.is_main()) std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(step),
                                       loss.item<double>(), val);
      std::fflush(stdout);
    }
  }
  const NamedTensors parameters = strategy->full_parameters();
  print_sample(parameters, config, text, flags, world);
  if (world.is_main()) std::printf("params-sha256: %s\n", fashion_mnist::tensors_sha256(parameters).c_str());
}

}  // namespace gpt_example
