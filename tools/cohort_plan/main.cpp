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
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/number.h"
#include "model_size.h"
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

void print_plan(const MemoryPlanInput& base, const std::vector<int>& stages, const std::string& source) {
  const auto per = cohort::detail::bytes_per_param(base.precision, base.optimizer);
  const bool mixed = base.precision != PlanPrecision::kFp32;
  std::printf("cohort-plan: ZeRO model states per rank (arXiv:1910.02054); GB = 1e9 bytes\n");
  std::printf("  parameters  %" PRId64 " (%s)\n", base.num_params, source.c_str());
  std::printf("  ranks       %" PRId64 "\n", base.ranks);
  std::printf("  precision   %s%s: params %" PRId64 " + grads %" PRId64 " bytes per parameter\n",
              cohort::detail::to_string(base.precision).c_str(), mixed ? " mixed precision" : "", per.params,
              per.grads);
  std::printf("  optimizer   %s: K = %" PRId64 " bytes per parameter (%s)\n",
              cohort::detail::to_string(base.optimizer).c_str(), per.optimizer_states,
              cohort::detail::describe_optimizer_states(base.precision, base.optimizer).c_str());
  std::vector<std::vector<std::string>> rows = {{"params", "grads", "optimizer states", "total per rank"}};
  for (int stage : stages) {
    MemoryPlanInput input = base;
    input.stage = stage;
    const MemoryPlan plan = cohort::detail::plan_memory(input);
    rows.push_back({cell(plan.params), cell(plan.grads), cell(plan.optimizer_states), cell(plan.total())});
  }
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
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Bytes per rank of parameters, gradients and optimizer states at each ZeRO stage (the ZeRO "
      "paper's model; activations and buffers not included). Example: cohort-plan --params 7.5e9 "
      "--ranks 64",
      "cohort-plan"};
  std::string params_text, model, checkpoint, stage_text = "all", precision_text = "fp16";
  std::string optimizer_text = "adam";
  std::string ranks_text;
  auto* params_option = app.add_option("--params", params_text, "Parameter count (7.5e9 is accepted)");
  auto* model_option = app.add_option("--model", model,
                                      "A model cohort-plan can build: fashion_mnist_cnn (the example's CNN)");
  auto* checkpoint_option = app.add_option("--checkpoint", checkpoint,
                                           "A file from torch::save(module), torch::pickle_save or a safetensors file "
                                           "(cohort-ckpt consolidate's): count its tensors");
  params_option->excludes(model_option)->excludes(checkpoint_option);
  model_option->excludes(checkpoint_option);
  const cohort::IntegerRange ranks_range{"--ranks", 1, 1 << 20};
  app.add_option("--ranks", ranks_text,
                 "Data-parallel ranks (GPUs) sharing the model states (" + cohort::describe_range(ranks_range) + ")")
      ->required();
  app.add_option("--stage", stage_text, "ZeRO stage: 0 (plain data parallel), 1, 2, 3 or all")->capture_default_str();
  app.add_option("--precision", precision_text,
                 "fp16 or bf16 (mixed precision: 2-byte params and grads, fp32 master), or fp32")
      ->capture_default_str();
  app.add_option("--optimizer", optimizer_text, "adam, adamw (2 states), sgd_momentum (1 state) or sgd (none)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "cohort-plan: error: %s\n", e.what());
    return 2;
  }

  try {
    MemoryPlanInput input;
    std::string source;
    if (!params_text.empty()) {
      input.num_params = parse_count(params_text);
      source = "--params " + params_text;
    } else if (!model.empty() || !checkpoint.empty()) {
      const auto size = model.empty() ? cohort_plan::count_checkpoint(checkpoint)
                                      : cohort_plan::count_named_model(model);
      if (size.params < 1) throw cohort::Error("--checkpoint " + checkpoint + " holds no tensor elements");
      input.num_params = size.params;
      source = (model.empty() ? "--checkpoint " + checkpoint : "--model " + model) + ": " + size.format + ", " +
               std::to_string(size.tensors) + " tensors";
      if (size.buffer_elements > 0) {
        source += "; " + std::to_string(size.buffer_elements) + " buffer elements not counted";
      }
    } else {
      throw cohort::Error("give the model size: --params N, --model NAME or --checkpoint FILE");
    }
    input.ranks = cohort::parse_integer(ranks_text, ranks_range);
    try {
      input.precision = cohort::detail::parse_precision(precision_text);
      input.optimizer = cohort::detail::parse_plan_optimizer(optimizer_text);
    } catch (const cohort::Error& e) {
      throw cohort::Error(std::string("--") + e.what());  // "--precision=fp8 is not one of ..."
    }
    std::vector<int> stages;
    if (stage_text == "all") {
      stages = {0, 1, 2, 3};
    } else if (stage_text.size() == 1 && stage_text[0] >= '0' && stage_text[0] <= '3') {
      stages = {stage_text[0] - '0'};
    } else {
      throw cohort::Error("--stage=" + stage_text + " is not one of 0, 1, 2, 3, all");
    }
    print_plan(input, stages, source);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-plan: error: %s\n", e.what());
    return 2;
  }
}
