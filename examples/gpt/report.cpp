// The GPT example's report (see report.h).
#include "report.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "../fashion_mnist/digest.h"

namespace gpt_example {
namespace {

// "14.6 KiB", "812.0 MiB", "3.31 GiB": binary units, as `free` and `time -f %M` count.
std::string human(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes < (int64_t(1) << 20)) std::snprintf(text, sizeof text, "%.1f KiB", b / 1024);
  else if (bytes < (int64_t(1) << 30)) std::snprintf(text, sizeof text, "%.1f MiB", b / (1 << 20));
  else std::snprintf(text, sizeof text, "%.2f GiB", b / (1 << 30));
  return text;
}

// This process's peak resident memory (the kernel's high-water mark, what `time -f %M` reports).
int64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

int zero_stage(const std::string& strategy) {
  if (strategy == "ddp") return 0;
  if (strategy == "zero1") return 1;
  if (strategy == "zero2") return 2;
  return 3;  // zero3, fsdp
}

}  // namespace

void print_validation(cohort::Trainer& trainer, double val_loss) {
  if (!trainer.world().is_main()) return;
  const auto& metrics = trainer.callback_metrics();
  const auto train = metrics.find("train_loss");
  std::printf("step %lld: ", static_cast<long long>(trainer.global_step()));
  if (train != metrics.end()) std::printf("train loss %.4f, ", train->second);
  std::printf("val loss %.4f\n", val_loss);
  std::fflush(stdout);
}

void ValidationReport::on_validation_end(cohort::Trainer& trainer, cohort::TrainingModule&) {
  print_validation(trainer, trainer.callback_metrics().at("val_loss"));
  print_memory(trainer, flags_, "step " + std::to_string(trainer.global_step()));
}

void print_memory(cohort::Trainer& trainer, const Flags& flags, const std::string& when) {
  const int64_t mine = peak_rss_bytes();
  const int64_t largest = trainer.world().comm().allreduce(torch::tensor(mine), cohort::ReduceOp::kMax).item<int64_t>();
  if (!trainer.world().is_main()) return;
  const cohort::MemoryReport now = trainer.memory_report(), plan = trainer.planned_memory();
  // --offload-optimizer/--offload-params nvme: states on disk, apart from what a step lends.
  const std::string on_disk = now.file_bytes > 0 ? " (" + human(now.file_bytes) + " more in the swap files)" : "";
  std::string offload;  // the planner's flags for the same run
  if (flags.offload_optimizer != "none") offload += " --offload-optimizer " + flags.offload_optimizer;
  if (flags.offload_params != "none") offload += " --offload-params " + flags.offload_params;
  if (!offload.empty()) offload += " --cpu";
  const std::string plan_optimizer = flags.optimizer == "adamw" ? "adamw"
                                     : flags.momentum != 0      ? "sgd_momentum"
                                                                : "sgd";  // cohort-plan's names
  const std::string plan_disk = plan.file_bytes > 0 ? ", on file " + human(plan.file_bytes) : "";
  std::printf(
      "memory at %s: peak RSS %s (rank 0), %s (largest of %d ranks); per rank now: params %s, grads %s, "
      "optimizer %s%s, gathered units and buffers %s; cohort-plan --params %lld --ranks %d --stage %d "
      "--precision %s --optimizer %s%s: params %s, grads %s, optimizer %s%s\n",
      when.c_str(), human(mine).c_str(), human(largest).c_str(), trainer.world().size(),
      human(now.parameter_bytes).c_str(), human(now.gradient_bytes).c_str(), human(now.optimizer_bytes).c_str(),
      on_disk.c_str(), human(now.buffer_bytes + now.cached_bytes).c_str(), static_cast<long long>(plan.num_parameters),
      zero_stage(flags.strategy) == 0
          ? trainer.world().size() / static_cast<int>(flags.tensor_parallel * flags.pipeline_parallel)
                                      : trainer.shard_ranks(),
      zero_stage(flags.strategy), flags.precision == "bf16-mixed" && zero_stage(flags.strategy) > 0 ? "bf16" : "fp32",
      plan_optimizer.c_str(), offload.c_str(), human(plan.parameter_bytes).c_str(), human(plan.gradient_bytes).c_str(),
      human(plan.optimizer_bytes).c_str(), plan_disk.c_str());
  std::fflush(stdout);
}

void print_sample_and_digest(cohort::Trainer& trainer, cohort::models::GPT& gpt, const Text& text, const Flags& flags,
                             const cohort::models::GPTImpl::ForwardRunner& run) {
  const bool main = trainer.world().is_main();
  if (flags.sample_tokens > 0) {
    // Every rank samples the same tokens (same seed, same gathered weights): under zero3/fsdp each
    // forward gathers the blocks one at a time, so no rank holds the whole model.
    gpt->eval();
    torch::manual_seed(static_cast<uint64_t>(flags.seed));
    const int64_t newline = std::max<int64_t>(text.token_of[static_cast<unsigned char>('\n')], 0);
    auto tokens = gpt->generate(torch::full({1, 1}, newline, torch::kLong), flags.sample_tokens, 0.8, 0, run);
    if (main) std::printf("sample:\n%s\n", decode(text, tokens.narrow(1, 1, flags.sample_tokens)).c_str());
  }
  fashion_mnist::ParamsSha256 digest;
  torch::NoGradGuard no_grad;
  trainer.for_each_full_parameter([&](const std::string&, const torch::Tensor& value) {
    if (main) digest.add(value);
  });
  if (!main) return;
  std::printf("params-sha256: %s\n", digest.hex().c_str());
  std::fflush(stdout);
}

}  // namespace gpt_example
