// cohort-plan's second table: the memory a rank holds while a step runs (src/zero/step_memory_plan.h),
// beside the model states, and the peak it reaches. The model's shape comes from --model gpt's flags
// (nanoGPT's names, as examples/gpt takes them) or from --unit-params and --units for any model.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "zero/step_memory_plan.h"

namespace cohort_plan {

/// The command line's texts for the step's memory, read by step_input.
struct StepTexts {
  std::string n_layer, n_embd, n_head = "4", block_size = "64", vocab_size = "256",
                               batch_size = "16";  // examples/gpt's
  bool activation_checkpointing = false, sharded_init = false;
  std::string unit_params, units, prefetch_bucket_size, prefetch_units = "0", reduce_bucket_size;
  std::string optimizer_buffer_count, param_buffer_count, process_mib;
};

void add_step_options(CLI::App& app, StepTexts& texts);

/// Whether the command line gives a shape for the step's memory (--model gpt, or --unit-params);
/// throws cohort::Error for a GPT's shape flag without --model gpt.
bool wants_step_memory(const StepTexts& texts, const std::string& model);

/// --model gpt: its parameter count from the shape flags, and `source` saying so.
int64_t count_gpt(const StepTexts& texts, std::string& source);

/// The step's input for `states` (the stage set per row by the caller). Throws cohort::Error naming
/// the option for a bad value or one that does not apply.
cohort::detail::StepMemoryInput step_input(const StepTexts& texts, const std::string& model,
                                           const cohort::detail::MemoryPlanInput& states);

/// The table: per stage the step's parts and the peak per rank (on a GPU run: the device's and the host's).
void print_step_memory(const cohort::detail::StepMemoryInput& base, const std::vector<int>& stages);

}  // namespace cohort_plan
