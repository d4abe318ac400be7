// cohort-plan's table of the step's memory (step_report.h).
#include "step_report.h"

#include <torch/torch.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "cohort/error.h"
#include "cohort/number.h"
#include "models/gpt.h"
#include "world/node_room.h"

namespace cohort_plan {
namespace {

using cohort::detail::MemoryPlan;
using cohort::detail::PlanTier;
using cohort::detail::StepMemory;
using cohort::detail::StepMemoryInput;

// A whole count given as DeepSpeed's configs write them ("5e7" as well as "50000000").
int64_t whole(const std::string& option, const std::string& text, double least, double most) {
  const double value = cohort::parse_real(text, {option, least, most, "a whole number"});
  if (std::floor(value) != value)
    throw cohort::Error(option + " expects a whole number, got " + text, cohort::ErrorKind::kInvalidArgument);
  return static_cast<int64_t>(value);
}

int64_t whole_or(const std::string& option, const std::string& text, double least, double most, int64_t fallback) {
  return text.empty() ? fallback : whole(option, text, least, most);
}

cohort::models::GPTConfig gpt_of(const StepTexts& t) {
  if (t.n_layer.empty() || t.n_embd.empty())
    throw cohort::Error(
        "--model gpt needs its shape: --n-layer and --n-embd (and --block-size, --vocab-size, "
        "--batch-size when not the defaults)",
        cohort::ErrorKind::kInvalidArgument);
  auto config = cohort::models::GPTConfig()
                    .n_layer(whole("--n-layer", t.n_layer, 1, 1e5))
                    .n_embd(whole("--n-embd", t.n_embd, 1, 1 << 20))
                    .block_size(whole("--block-size", t.block_size, 1, 1 << 24))
                    .vocab_size(whole("--vocab-size", t.vocab_size, 1, 1 << 24));
  config.n_head(whole("--n-head", t.n_head, 1, 1e4));
  // As examples/gpt refuses them (hostile pass 8, M2): no such GPT exists.
  if (config.n_embd() % config.n_head() != 0)
    throw cohort::Error("--n-head " + t.n_head + " must divide --n-embd " + t.n_embd,
                        cohort::ErrorKind::kInvalidArgument);
  return config;
}

// A process that has run a small step: LibTorch's code, its heap and the BLAS buffers a rank touches
// too. A rank holds more (its transports' buffers and threads); --process-mib gives a measured figure.
int64_t own_process_bytes() {
  torch::manual_seed(0);
  torch::nn::Linear layer(256, 256);
  for (int i = 0; i < 2; ++i) layer->forward(torch::randn({64, 256})).sum().backward();
  return cohort::detail::resident_bytes();
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f MiB", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace

void add_step_options(CLI::App& app, StepTexts& t) {
  const std::string gpt = "--model gpt: ";
  app.add_option("--n-layer", t.n_layer, gpt + "transformer blocks (each a sharding unit)");
  app.add_option("--n-embd", t.n_embd, gpt + "width of the residual stream");
  app.add_option("--n-head", t.n_head, gpt + "attention heads")->capture_default_str();
  app.add_option("--block-size", t.block_size, gpt + "tokens per sequence")->capture_default_str();
  app.add_option("--vocab-size", t.vocab_size, gpt + "vocabulary (examples/gpt: the text's distinct bytes)")
      ->capture_default_str();
  app.add_option("--batch-size", t.batch_size, gpt + "sequences per rank and micro-step")->capture_default_str();
  app.add_flag("--activation-checkpointing", t.activation_checkpointing, gpt + "blocks recompute in backward");
  app.add_flag("--sharded-init", t.sharded_init,
               "Stage 3: each unit sharded as it is made (cohort::ShardedInit; examples/gpt's zero3 and fsdp)");
  app.add_option("--unit-params", t.unit_params,
                 "Other models: the largest sharding unit's parameters (stage 3 gathers whole units)");
  app.add_option("--units", t.units, "Other models: how many sharding units hold parameters");
  app.add_option("--stage3-prefetch-bucket-size", t.prefetch_bucket_size,
                 "Elements gathered ahead of the running unit (DeepSpeed's default 5e7)");
  app.add_option("--prefetch-units", t.prefetch_units,
                 "At most this many units ahead (FSDP2 and --strategy fsdp: 1; 0: "
                 "the bucket decides)")
      ->capture_default_str();
  app.add_option("--reduce-bucket-size", t.reduce_bucket_size, "Stage 1/2: elements per gradient group (5e8)");
  app.add_option("--optimizer-buffer-count", t.optimizer_buffer_count, "offload_optimizer.buffer_count (4)");
  app.add_option("--param-buffer-count", t.param_buffer_count, "offload_param.buffer_count (5)");
  app.add_option("--process-mib", t.process_mib,
                 "A rank's resident MiB before its model (default: this process's after a small step)");
}

bool wants_step_memory(const StepTexts& t, const std::string& model) {
  if (model != "gpt") {
    const std::vector<std::pair<const char*, bool>> gpt_only = {
        {"--n-layer", !t.n_layer.empty()},
        {"--n-embd", !t.n_embd.empty()},
        {"--activation-checkpointing", t.activation_checkpointing}};
    for (const auto& [option, given] : gpt_only)
      if (given)
        throw cohort::Error(std::string(option) + " describes --model gpt, not " +
                                (model.empty() ? std::string("a --params or --checkpoint model") : "--model " + model),
                            cohort::ErrorKind::kInvalidArgument);
  }
  const bool wanted = model == "gpt" || !t.unit_params.empty();
  // Hostile pass 9: these were ignored unread without a step table (--process-mib nan: exit 0).
  const std::vector<std::pair<const char*, bool>> step_only = {
      {"--units", !t.units.empty()},
      {"--stage3-prefetch-bucket-size", !t.prefetch_bucket_size.empty()},
      {"--reduce-bucket-size", !t.reduce_bucket_size.empty()},
      {"--optimizer-buffer-count", !t.optimizer_buffer_count.empty()},
      {"--param-buffer-count", !t.param_buffer_count.empty()},
      {"--process-mib", !t.process_mib.empty()},
      {"--sharded-init", t.sharded_init}};
  for (const auto& [option, given] : step_only)
    if (given && !wanted)
      throw cohort::Error(std::string(option) +
                              " is for the step-memory table: give the model's shape with --model "
                              "gpt or --unit-params",
                          cohort::ErrorKind::kInvalidArgument);
  return wanted;
}

int64_t count_gpt(const StepTexts& t, std::string& source) {
  const auto config = gpt_of(t);
  source = "--model gpt: " + std::to_string(config.n_layer()) + " blocks of width " + std::to_string(config.n_embd()) +
           ", block size " + std::to_string(config.block_size()) + ", vocabulary " +
           std::to_string(config.vocab_size());
  // The count in double first: 1e5 blocks of width 2^20 are past what an int64 (and the planner) holds.
  const double e = double(config.n_embd());
  const double count = double(config.n_layer()) * (12 * e * e + 13 * e) +
                       double(config.vocab_size() + config.block_size()) * e;
  if (count > 9007199254740992.0)
    throw cohort::Error("--model gpt: " + std::to_string(config.n_layer()) + " blocks of width " + t.n_embd +
                            " come to more than 2^53 parameters, past what cohort-plan counts",
                        cohort::ErrorKind::kInvalidArgument);
  return cohort::models::gpt_num_parameters(config);
}

StepMemoryInput step_input(const StepTexts& t, const std::string& model,
                           const cohort::detail::MemoryPlanInput& states) {
  StepMemoryInput in;
  in.states = states;
  if (model == "gpt") {
    if (!t.unit_params.empty() || !t.units.empty())
      throw cohort::Error("--unit-params and --units are for other models: --model gpt's units are its blocks",
                          cohort::ErrorKind::kInvalidArgument);
    const auto config = gpt_of(t);
    const int64_t e = config.n_embd(), block = 12 * e * e + 13 * e;
    const int64_t root = states.num_params - config.n_layer() * block;  // embeddings and the last LayerNorm
    in.unit_params = std::max(block, root);
    in.units = config.n_layer() + 1;
    in.activation_bytes = cohort::models::gpt_activation_bytes(config, whole("--batch-size", t.batch_size, 1, 1 << 24),
                                                               config.block_size(), t.activation_checkpointing);
  } else {
    in.unit_params = whole("--unit-params", t.unit_params, 1, 9007199254740992.0);
    in.units = whole_or("--units", t.units, 1, 1e9, 1);
    if (in.unit_params > states.num_params)
      throw cohort::Error("--unit-params " + t.unit_params + " is more than the model's " +
                              std::to_string(states.num_params) + " parameters",
                          cohort::ErrorKind::kInvalidArgument);
    if (in.units > states.num_params)  // each unit holds a parameter at least
      throw cohort::Error(
          "--units " + t.units + " is more than the model's " + std::to_string(states.num_params) + " parameters",
          cohort::ErrorKind::kInvalidArgument);
  }
  in.prefetch_bucket_size = whole_or("--stage3-prefetch-bucket-size", t.prefetch_bucket_size, 0, 9e15,
                                     in.prefetch_bucket_size);
  in.prefetch_units = whole("--prefetch-units", t.prefetch_units, 0, 1e9);
  in.reduce_bucket_size = whole_or("--reduce-bucket-size", t.reduce_bucket_size, 1, 9e15, in.reduce_bucket_size);
  in.optimizer_buffer_count = whole_or("--optimizer-buffer-count", t.optimizer_buffer_count, 1, 1e6,
                                       in.optimizer_buffer_count);
  in.param_buffer_count = whole_or("--param-buffer-count", t.param_buffer_count, 1, 1e6, in.param_buffer_count);
  in.sharded_init = t.sharded_init;
  in.process_bytes = t.process_mib.empty() ? own_process_bytes()
                                           : whole("--process-mib", t.process_mib, 0, 1 << 30) * (int64_t(1) << 20);
  return in;
}

void print_step_memory(const StepMemoryInput& base, const std::vector<int>& stages) {
  const bool cpu = base.states.cpu_run;
  std::printf(
      "\nstep memory per rank, beside the model states (MiB = 2^20 bytes): stage 3's gathered units "
      "(%" PRId64 " of %" PRId64
      " parameters the largest), gradients of the reductions in flight, "
      "the swap files' buffers, activations %s, process %s; the peak is the larger of the "
      "construction (before the engine takes the model) and the states in memory with the step\n",
      base.unit_params, base.states.num_params, mib(base.activation_bytes).c_str(), mib(base.process_bytes).c_str());
  std::printf("%-5s  %12s  %12s  %12s  %12s  %s\n", "stage", "gathered", "reducing", "swapping", "construction",
              cpu ? "peak per rank" : "peak per rank in the step: device, host");
  for (int stage : stages) {
    StepMemoryInput in = base;
    in.states.stage = stage;
    const MemoryPlan plan = cohort::detail::plan_memory(in.states);
    const StepMemory step = cohort::detail::plan_step_memory(in);
    std::printf("%-5d  %12s  %12s  %12s  %12s  ", stage, mib(step.gathered).c_str(), mib(step.reducing).c_str(),
                mib(step.swapping).c_str(), mib(cohort::detail::planned_construction_bytes(in)).c_str());
    if (cpu) {
      std::printf("%s\n", mib(cohort::detail::planned_peak_bytes(in)).c_str());
    } else {  // the device computes and gathers; the host holds the offloaded states, the buffers and the process
      const int64_t device = plan.device + step.gathered + step.reducing + step.activations;
      std::printf("%s, %s\n", mib(device).c_str(), mib(plan.host + step.swapping + step.process).c_str());
    }
  }
}

}  // namespace cohort_plan
