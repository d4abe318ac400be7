// The GPT example on cohort::Trainer: a TrainingModule with its own layers (the GPT, whose blocks are
// sharding units) trained under --strategy ddp, zero1, zero2, zero3 or fsdp (zero3 and fsdp are the
// same for this model: its blocks are the units either way). The Trainer starts the workers
// (--devices N), shards the windows over ranks, validates every --eval-interval steps; this file
// prints the header, "val loss X" at each validation, a sample of text and params-sha256.
#include "train.h"

#include <cohort/safetensors.h>
#include <cohort/trainer.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <cstdio>
#include <memory>
#include <thread>

#include "../common/threads.h"
#include "../fashion_mnist/digest.h"
#include "models/gpt.h"

namespace gpt_example {
namespace {

using cohort::models::GPT;
using cohort::models::GPTConfig;

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape(-1));
}

struct GptModule : cohort::TrainingModule {
  GptModule(const GPTConfig& config, const Flags& flags) : flags_(flags) { gpt = register_module("gpt", GPT(config)); }
  torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
    auto loss = loss_of(gpt->forward(batch.data), batch.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(cohort::Batch& batch, int64_t) override {
    log("val_loss", loss_of(gpt->forward(batch.data), batch.target), cohort::LogOptions().sync_dist(true));
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    return std::make_unique<torch::optim::AdamW>(
        std::move(parameters), torch::optim::AdamWOptions(flags_.lr).betas({0.9, 0.99}).weight_decay(flags_.weight_decay));
  }
  GPT gpt{nullptr};
  Flags flags_;
};

void print_validation(cohort::Trainer& trainer, double val_loss) {
  if (!trainer.world().is_main()) return;
  const auto& metrics = trainer.callback_metrics();
  const auto train = metrics.find("train_loss");
  std::printf("step %lld: ", static_cast<long long>(trainer.global_step()));
  if (train != metrics.end()) std::printf("train loss %.4f, ", train->second);
  std::printf("val loss %.4f\n", val_loss);
  std::fflush(stdout);
}

// Prints each validation's loss as the Trainer finishes it.
struct ValidationReport : cohort::Callback {
  void on_validation_end(cohort::Trainer& trainer, cohort::TrainingModule&) override {
    print_validation(trainer, trainer.callback_metrics().at("val_loss"));
  }
};

cohort::TrainerOptions trainer_options(const Flags& flags) {
  return cohort::TrainerOptions()
      .devices(flags.devices)
      .accelerator("cpu")
      .strategy(flags.strategy)
      .max_steps(flags.max_steps)
      .val_check_interval(static_cast<double>(flags.eval_interval))
      .num_sanity_val_steps(0)
      .seed(flags.seed)
      .enable_progress_bar(false)
      .enable_checkpointing(false)
      .logger(false);
}

GPTConfig model_config(const Flags& flags, const Text& text) {
  return GPTConfig().n_layer(flags.n_layer).n_head(flags.n_head).n_embd(flags.n_embd).block_size(flags.block_size)
      .vocab_size(static_cast<int64_t>(text.vocabulary.size())).dropout(flags.dropout).bias(flags.bias)
      .unit(cohort::UnitOptions().reshard_after_forward(!flags.keep_gathered)
                .activation_checkpointing(flags.activation_checkpointing));
}

// The digest hashes the parameters in named_parameters() order; the ZeRO engine's full_parameters()
// at stage 3 lists the root unit's parameters first (ln_f before the blocks), so put them in order.
std::vector<std::pair<std::string, torch::Tensor>> in_module_order(
    const std::vector<std::pair<std::string, torch::Tensor>>& parameters, const torch::nn::Module& module) {
  const std::map<std::string, torch::Tensor> by_name(parameters.begin(), parameters.end());
  std::vector<std::pair<std::string, torch::Tensor>> ordered;
  for (const auto& item : module.named_parameters()) ordered.emplace_back(item.key(), by_name.at(item.key()));
  return ordered;
}

// A few lines of text from rank 0's copy of the trained weights.
void print_sample(const std::vector<std::pair<std::string, torch::Tensor>>& parameters, const GPTConfig& config,
                  const Text& text, const Flags& flags) {
  if (flags.sample_tokens == 0) return;
  GPT copy(GPTConfig(config).dropout(0.0));
  const std::map<std::string, torch::Tensor> by_name(parameters.begin(), parameters.end());
  cohort::load_state_dict(*copy, by_name, cohort::StateDictOptions().prefix("gpt."));
  copy->eval();
  torch::manual_seed(static_cast<uint64_t>(flags.seed));
  const int64_t newline = std::max<int64_t>(text.token_of[static_cast<unsigned char>('\n')], 0);
  auto tokens = copy->generate(torch::full({1, 1}, newline, torch::kLong), flags.sample_tokens, 0.8);
  std::printf("sample:\n%s\n", decode(text, tokens.narrow(1, 1, flags.sample_tokens)).c_str());
}

}  // namespace

void run_training(const Flags& flags) {
  cohort::Trainer trainer(trainer_options(flags));  // starts or joins the workers before anything else
  const cohort::World& world = trainer.world();
  const int64_t threads = flags.threads > 0 ? flags.threads
      : std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / world.local_size());
  examples::set_threads(static_cast<int>(threads));
  const Text text = load_text(flags.data, flags.block_size + 2);
  const GPTConfig config = model_config(flags, text);
  torch::manual_seed(static_cast<uint64_t>(flags.seed));  // the seed alone fixes the initial weights
  GptModule module(config, flags);
  if (world.is_main())
    std::printf("text: %s, %d file(s), %lld bytes, vocabulary %zu; GPT %lld parameters; %s on %d rank(s), %lld "
                "thread(s) each\n", flags.data.c_str(), text.files, static_cast<long long>(text.bytes.size()),
                text.vocabulary.size(), static_cast<long long>(cohort::models::gpt_num_parameters(config)),
                flags.strategy.c_str(), world.size(), static_cast<long long>(threads));
  std::fflush(stdout);
  // Training: every window of the train split, shuffled each epoch. Validation: eval_iters batches
  // per rank of windows evenly spaced over the validation split, the same at every validation.
  const int64_t train_windows = text.train.numel() - flags.block_size - 1;
  cohort::DataLoader train(std::make_shared<WindowDataset>(text.train, torch::arange(train_windows), flags.block_size),
                           cohort::LoaderOptions().batch_size(flags.batch_size).shuffle(true).drop_last(true));
  const int64_t val_count = flags.eval_iters * flags.batch_size * world.size();
  auto val_starts = torch::linspace(0, static_cast<double>(text.val.numel() - flags.block_size - 1), val_count,
                                    torch::kFloat64).to(torch::kLong);
  cohort::DataLoader val(std::make_shared<WindowDataset>(text.val, val_starts, flags.block_size),
                         cohort::LoaderOptions().batch_size(flags.batch_size));
  trainer.add_callback(std::make_shared<ValidationReport>());
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  if (trainer.global_step() % flags.eval_interval != 0) print_validation(trainer, trainer.validate(module, val).at("val_loss"));
  const auto parameters = in_module_order(trainer.full_parameters(), module);  // a collective at stage 3
  if (!world.is_main()) return;
  print_sample(parameters, config, text, flags);
  std::printf("params-sha256: %s\n", fashion_mnist::tensors_sha256(parameters).c_str());
}

}  // namespace gpt_example
