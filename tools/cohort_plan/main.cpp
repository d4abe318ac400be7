// cohort-plan: bytes per rank of the model states (parameters, gradients, optimizer states) at each
// ZeRO stage, from the ZeRO paper's formulas (src/zero/memory_plan.h), for a parameter count, the
// example's model or a checkpoint. `cohort-plan --params 7.5e9 --ranks 64` is the paper's example:
// 120.0, 31.4, 16.6 and 1.9 GB. Bad input is one `cohort-plan: error: ...` line and exit status 2.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "../common/cli_errors.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "model_size.h"
#include "step_report.h"
#include "zero/memory_plan.h"

namespace {

using cohort::detail::MemoryPlan;
using cohort::detail::MemoryPlanInput;
using cohort::detail::PlanOptimizer;
using cohort::detail::PlanPrecision;

// "7.5e9", "1199882": a whole, positive count up to 2^53 (where doubles stop being exact). The text is
// read again as a long double (64 bits of mantissa at least), which holds 2^53 + 1 and 2^52 + 0.5
// exactly: a double would round them to a count in range and accept them.
int64_t parse_count(const std::string& text) {
  constexpr double kMax = 9007199254740992.0;
  const double value = cohort::parse_real(text, {"--params", 1, kMax, "a parameter count"});
  const long double exact = std::strtold(text.c_str(), nullptr);
  if (exact > static_cast<long double>(kMax)) {
    throw cohort::Error("--params is out of range: expected a parameter count from 1 to 9007199254740992, got " + text);
  }
  if (std::floor(value) != value || std::floor(exact) != exact) {
    throw cohort::Error("--params expects a whole parameter count from 1 to 9007199254740992, got " + text);
  }
  return static_cast<int64_t>(value);
}

// "15.0 GB (15000000000)": GB = 1e9 bytes, as the paper counts.
std::string cell(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f GB (%" PRId64 ")", static_cast<double>(bytes) / 1e9, bytes);
  return text;
}

const char* kStageMeaning[] = {"nothing (plain DP)", "optimizer states", "+ gradients", "+ parameters"};

const char* tier_name(cohort::detail::PlanTier tier) {
  return tier == cohort::detail::PlanTier::kNvme ? "nvme" : tier == cohort::detail::PlanTier::kHost ? "cpu" : "none";
}

// With offload: where each part lives, and the bytes per rank of each tier.
void print_tiers(const MemoryPlanInput& base, const std::vector<int>& stages) {
  std::printf("\n  offload     optimizer %s, params %s%s\n", tier_name(base.offload_optimizer),
              tier_name(base.offload_params),
              base.cpu_run ? "; ranks on CPUs: device and host are the same memory, gradients follow an nvme "
                             "optimizer to the file at stage 2/3"
                           : "");
  std::printf("%-5s  %22s  %22s  %22s\n", "stage", "device", "host", "nvme");
  for (int stage : stages) {
    MemoryPlanInput input = base;
    input.stage = stage;
    const MemoryPlan plan = cohort::detail::plan_memory(input);
    std::printf("%-5d  %22s  %22s  %22s\n", stage, cell(plan.device).c_str(), cell(plan.host).c_str(),
                cell(plan.nvme).c_str());
  }
}

void print_plan(const MemoryPlanInput& base, const std::vector<int>& stages, const std::string& source) {
  const auto per = cohort::detail::bytes_per_param(base.precision, base.optimizer);
  const bool mixed = base.precision != PlanPrecision::kFp32;
  // Every row before the header: a plan past an int64 is refused with nothing printed (hostile pass 8).
  std::vector<std::vector<std::string>> rows = {{"params", "grads", "optimizer states", "total per rank"}};
  for (int stage : stages) {
    MemoryPlanInput input = base;
    input.stage = stage;
    const MemoryPlan plan = cohort::detail::plan_memory(input);
    rows.push_back({cell(plan.params), cell(plan.grads), cell(plan.optimizer_states), cell(plan.total())});
  }
  std::printf("cohort-plan: ZeRO model states per rank (arXiv:1910.02054); GB = 1e9 bytes\n");
  std::printf("  parameters  %" PRId64 " (%s)\n", base.num_params, source.c_str());
  std::printf("  ranks       %" PRId64 "\n", base.ranks);
  std::printf("  precision   %s%s: params %" PRId64 " + grads %" PRId64 " bytes per parameter\n",
              cohort::detail::to_string(base.precision).c_str(), mixed ? " mixed precision" : "", per.params,
              per.grads);
  std::printf("  optimizer   %s: K = %" PRId64 " bytes per parameter (%s)\n",
              cohort::detail::to_string(base.optimizer).c_str(), per.optimizer_states,
              cohort::detail::describe_optimizer_states(base.precision, base.optimizer).c_str());
  const bool offload = base.offload_optimizer != cohort::detail::PlanTier::kDevice ||
                       base.offload_params != cohort::detail::PlanTier::kDevice;
  if (offload && !mixed) std::printf("              with offload the fp32 master is a copy: K + 4\n");
  std::vector<int> width(4, 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], static_cast<int>(row[i].size()));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    std::printf(r == 0 ? "\n%-5s  %-18s" : "%-5s  %-18s", r == 0 ? "stage" : std::to_string(stages[r - 1]).c_str(),
                r == 0 ? "sharded" : kStageMeaning[stages[r - 1]]);
    for (size_t i = 0; i < rows[r].size(); ++i) std::printf("  %*s", width[i], rows[r][i].c_str());
    std::printf("\n");
  }
  if (offload || base.cpu_run) print_tiers(base, stages);
}

// The command line as given, read into a MemoryPlanInput by plan_input.
struct Texts {
  std::string params, model, checkpoint, stage = "all", precision = "fp16", optimizer = "adam", ranks;
  std::string offload_optimizer = "none", offload_params = "none";
  bool cpu_run = false;
  cohort_plan::StepTexts step;  // the step's memory: the model's shape and the engine's settings
};

const cohort::IntegerRange kRanksRange{"--ranks", 1, 1 << 20};

void add_options(CLI::App& app, Texts& t) {
  auto* params_option = app.add_option("--params", t.params, "Parameter count (7.5e9 is accepted)");
  auto* model_option = app.add_option("--model", t.model,
                                      "A model cohort-plan can build: fashion_mnist_cnn (the example's CNN), or gpt "
                                      "(examples/gpt's, shaped by --n-layer, --n-embd, ...: adds the step's memory)");
  auto* checkpoint_option = app.add_option("--checkpoint", t.checkpoint,
                                           "A file from torch::save(module), torch::pickle_save or a safetensors file "
                                           "(cohort-ckpt consolidate's): count its tensors");
  params_option->excludes(model_option)->excludes(checkpoint_option);
  model_option->excludes(checkpoint_option);
  app.add_option("--ranks", t.ranks,
                 "Data-parallel ranks (GPUs) sharing the model states (" + cohort::describe_range(kRanksRange) + ")")
      ->required();
  app.add_option("--stage", t.stage, "ZeRO stage: 0 (plain data parallel), 1, 2, 3 or all")->capture_default_str();
  app.add_option("--precision", t.precision,
                 "fp16 or bf16 (mixed precision: 2-byte params and grads, fp32 master), or fp32")
      ->capture_default_str();
  app.add_option("--optimizer", t.optimizer, "adam, adamw (2 states), sgd_momentum (1 state) or sgd (none)")
      ->capture_default_str();
  app.add_option("--offload-optimizer", t.offload_optimizer,
                 "none, cpu or nvme: where the optimizer states (and a separate fp32 master) live (stages 1-3)")
      ->capture_default_str();
  app.add_option("--offload-params", t.offload_params,
                 "none, cpu or nvme: where stage 3's parameter shards live between gathers (max_in_cpu 0)")
      ->capture_default_str();
  app.add_flag("--cpu", t.cpu_run, "The ranks compute on CPUs (device memory is host memory)");
  cohort_plan::add_step_options(app, t.step);
}

// The parameter count, from --params, --model or --checkpoint; `source` says which.
int64_t count_parameters(const Texts& t, std::string& source) {
  if (!t.params.empty()) {
    source = "--params " + t.params;
    return parse_count(t.params);
  }
  if (t.model.empty() && t.checkpoint.empty())
    throw cohort::Error("give the model size: --params N, --model NAME or --checkpoint FILE");
  if (t.model == "gpt") return cohort_plan::count_gpt(t.step, source);
  const auto size = t.model.empty() ? cohort_plan::count_checkpoint(t.checkpoint)
                                    : cohort_plan::count_named_model(t.model);
  if (size.params < 1) throw cohort::Error("--checkpoint " + t.checkpoint + " holds no tensor elements");
  source = (t.model.empty() ? "--checkpoint " + t.checkpoint : "--model " + t.model) + ": " + size.format + ", " +
           std::to_string(size.tensors) + " tensors";
  if (size.buffer_elements > 0) source += "; " + std::to_string(size.buffer_elements) + " buffer elements not counted";
  return size.params;
}

// --stage all: every stage the offload applies to (the optimizer's from 1, the parameters' at 3).
std::vector<int> stages_of(const Texts& t, const MemoryPlanInput& input) {
  if (t.stage.size() == 1 && t.stage[0] >= '0' && t.stage[0] <= '3') return {t.stage[0] - '0'};
  if (t.stage != "all") throw cohort::Error("--stage=" + t.stage + " is not one of 0, 1, 2, 3, all");
  if (input.offload_params != cohort::detail::PlanTier::kDevice) return {3};
  if (input.offload_optimizer != cohort::detail::PlanTier::kDevice) return {1, 2, 3};
  return {0, 1, 2, 3};
}

MemoryPlanInput plan_input(const Texts& t, std::string& source) {
  MemoryPlanInput input;
  input.num_params = count_parameters(t, source);
  input.ranks = cohort::parse_integer(t.ranks, kRanksRange);
  try {
    input.precision = cohort::detail::parse_precision(t.precision);
    input.optimizer = cohort::detail::parse_plan_optimizer(t.optimizer);
    input.offload_optimizer = cohort::detail::parse_plan_tier("offload-optimizer", t.offload_optimizer);
    input.offload_params = cohort::detail::parse_plan_tier("offload-params", t.offload_params);
  } catch (const cohort::Error& e) {
    throw cohort::Error(std::string("--") + e.what());  // "--precision=fp8 is not one of ..."
  }
  input.cpu_run = t.cpu_run;
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Bytes per rank of parameters, gradients and optimizer states at each ZeRO stage (the ZeRO "
      "paper's model; activations and buffers not included). Example: cohort-plan --params 7.5e9 "
      "--ranks 64",
      "cohort-plan"};
  Texts texts;
  add_options(app, texts);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cohort_tools::parse_error_exit(app, e, "cohort-plan");
  }
  try {
    std::string source;
    const MemoryPlanInput input = plan_input(texts, source);
    const std::vector<int> stages = stages_of(texts, input);
    if (texts.step.sharded_init && std::find(stages.begin(), stages.end(), 3) == stages.end())
      throw cohort::Error(
          "--sharded-init is stage 3's (cohort::ShardedInit shards its units as they are made), not "
          "--stage " +
          texts.stage + "'s");
    std::optional<cohort::detail::StepMemoryInput> step;  // read whole before anything is printed
    if (cohort_plan::wants_step_memory(texts.step, texts.model))
      step = cohort_plan::step_input(texts.step, texts.model, input);
    for (int stage : stages) {  // a plan past an int64 is refused before anything is printed
      if (!step) break;
      auto each = *step;
      each.states.stage = stage;
      cohort::detail::planned_peak_bytes(each);
    }
    print_plan(input, stages, source);
    if (step) cohort_plan::print_step_memory(*step, stages);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-plan: error: %s\n", e.what());
    return 2;
  }
}
