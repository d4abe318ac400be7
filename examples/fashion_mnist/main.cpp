// fashion_mnist: the main cohort job. Trains a small CNN on Fashion-MNIST with cohort::Trainer on
// every rank the launcher gives it (cohortrun, torchrun, srun, mpirun), or on --devices N local
// workers it starts itself. This file only reads the command line and turns any failure into one
// `error: ...` line (exit status 2 for a bad command line, 1 for a failed run); train.cpp does the work.
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

#include <cohort/error.h>
#include <cohort/number.h>

#include "../common/cli_choices.h"
#include "../common/cli_main.h"
#include "../common/cli_numbers.h"
#include "../common/cli_paths.h"
#include "train.h"

namespace {

using examples::add_choice;
using examples::add_directory;
using examples::add_integer;
using examples::add_real;

// --powersgd-rank and --powersgd-start-iter are read by the PowerSGD hooks only: given without one,
// they were silently ignored.
void check_powersgd_flags(const CLI::App& app, const std::string& hook) {
  if (hook == "powersgd" || hook == "batched_powersgd") return;
  for (const char* flag : {"--powersgd-rank", "--powersgd-start-iter"}) {
    if (app.count(flag) == 0) continue;
    throw cohort::Error(std::string(flag) + " " + app[flag]->as<std::string>() +
                            " is read only with --ddp-comm-hook powersgd or batched_powersgd (" +
                            (hook.empty() ? "no hook is given" : "the hook is " + hook) +
                            "): add the hook, or leave the flag out",
                        cohort::ErrorKind::kInvalidArgument);
  }
}

// --zero-stage and --deepspeed-config train with the ZeRO engine in place of DDP: with --strategy dp,
// pipeline or another ZeRO stage they silently ran the engine instead of what --strategy asked for.
void check_engine_flags(const fashion_mnist::TrainConfig& config) {
  const std::string& strategy = config.strategy;
  if (strategy == "ddp" || strategy == "single") return;
  const auto refuse = [&](const std::string& flag, const std::string& value, const std::string& fix) {
    throw cohort::Error("--strategy " + strategy + " and " + flag + " " + value +
                            " ask for two different strategies: " + flag +
                            " trains with the ZeRO engine in place of ddp (the default) or single only; " + fix,
                        cohort::ErrorKind::kInvalidArgument);
  };
  const std::string stage = std::to_string(config.zero_stage);
  if (config.zero_stage >= 0 && strategy != "zero" + stage) refuse("--zero-stage", stage, "leave one of them out");
  if (!config.deepspeed_config.empty() && config.zero_stage < 0)
    refuse("--deepspeed-config", config.deepspeed_config,
           strategy.rfind("zero", 0) == 0
               ? "leave --strategy out and give --zero-stage " + strategy.substr(4) + " to override the file's stage"
               : "leave one of them out");
}

}  // namespace

int main(int argc, char** argv) {
  fashion_mnist::TrainConfig config;
  CLI::App app{
      "Trains a CNN on Fashion-MNIST with cohort::Trainer; --devices N starts N local workers, or run it "
      "under cohortrun, torchrun, srun or mpirun."};
  add_integer(app, {"--epochs", 1, 100000}, config.epochs, "Passes over the training set");
  add_integer(app, {"--batch-size", 1, 1 << 20}, config.batch_size,
              "Samples per step on each rank (each replica under --strategy dp)");
  add_real(app, {"--lr", 1e-12, 1000}, config.lr, "Learning rate of Adam");
  add_integer(app, {"--seed", 0, (int64_t(1) << 53) - 1}, config.seed,
              "Seed of the initial weights and of the shuffle (at most 2^53 - 1: a checkpoint saves it exactly)");
  add_integer(app, {"--threads", 0, 1024}, config.threads,
              "Torch threads per rank (0: usable cores / ranks on this node, at least 1; more than the "
              "usable cores only with --oversubscribe)");
  app.add_flag("--oversubscribe", config.oversubscribe,
               "Allow --threads above the cores this process may use");
  add_integer(app, {"--max-steps", 0, int64_t(1e12)}, config.max_steps,
              "Stop after this many steps in all (0: no limit)");
  app.add_option("--data", config.data_dir, "Directory of the four Fashion-MNIST IDX files")
      ->capture_default_str();
  add_choice(app, "--progress", config.progress, {"auto", "bar", "lines", "off"},
             "Progress bar: auto (in place on a terminal, else a line every ~10%), bar, lines, off");
  examples::add_checkpoint_flags(app, config.checkpoint);
  add_integer(app, {"--zero-stage", 0, 3}, config.zero_stage,
              "Train with the ZeRO engine at this stage instead of DDP (Adam at --lr)")
      ->default_str("");
  examples::add_existing_file(app, "--deepspeed-config", config.deepspeed_config,
                              "Train with the ZeRO engine as this DeepSpeed ds_config.json says (--zero-stage "
                              "overrides its stage; with --strategy ddp or single only)");
  examples::add_devices(app, config.devices,
                        "Processes on this node: N (started by the program itself without a launcher) or auto; "
                        "with --strategy dp, replicas in this process");
  add_choice(app, "--strategy", config.strategy, {"ddp", "dp", "zero1", "zero2", "zero3", "pipeline", "single"},
             "ddp, dp (--devices replicas on threads of this one process), zero1, zero2, zero3, pipeline "
             "(the network cut into one stage per rank, 1F1B over 4 microbatches) or single; --zero-stage and "
             "--deepspeed-config replace ddp or single only");
  add_choice(app, "--precision", config.precision, {"32-true", "32", "bf16-mixed", "bf16", "16-mixed", "16"},
             "32-true, bf16-mixed or 16-mixed (16-mixed: GPU and ZeRO only)");
  add_choice(app, "--ddp-comm-hook", config.ddp_comm_hook, {"fp16", "bf16", "powersgd", "batched_powersgd"},
             "DDP gradient compression: fp16, bf16, powersgd or batched_powersgd (strategy ddp only)");
  add_integer(app, {"--powersgd-rank", 1, 1024}, config.powersgd_rank,
              "PowerSGD's matrix_approximation_rank (with --ddp-comm-hook powersgd)");
  add_integer(app, {"--powersgd-start-iter", 0, int64_t(1e12)}, config.powersgd_start_iter,
              "Steps of plain averaging before PowerSGD starts (PyTorch's start_powerSGD_iter)");
  app.add_flag("--no-memory-check", config.no_memory_check,
               "Skip the check that the batch's estimated memory fits in the memory available");
  app.callback([&] {
    config.checkpoint.check();
    check_powersgd_flags(app, config.ddp_comm_hook);
    check_engine_flags(config);
  });
  return examples::parse_and_run(app, argc, argv, [&] { fashion_mnist::run_training(config); });
}
