// fashion_mnist: the main cohort job. Trains a small CNN on Fashion-MNIST on every rank the
// launcher gives it (cohortrun, torchrun, srun, mpirun, or a lone process). This file only reads
// the command line and turns any failure into one `error: ...` line and exit status 1; train.cpp
// does the work.
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "train.h"

namespace {

// CLI11 2.1's PositiveNumber says "not in range 0.000000 to 1797693...": say it plainly instead.
CLI::Validator bounded(const std::string& name, const std::string& rule, bool (*ok)(double)) {
  return CLI::Validator(
      [rule, ok](std::string& text) -> std::string {
        double value = 0;
        return CLI::detail::lexical_cast(text, value) && ok(value)
                   ? ""
                   : "must be " + rule + ", got " + text;
      },
      name);
}
const CLI::Validator kPositive = bounded("POSITIVE", "> 0", [](double v) { return v > 0; });
const CLI::Validator kNonNegative = bounded("NONNEGATIVE", ">= 0", [](double v) { return v >= 0; });

}  // namespace

int main(int argc, char** argv) {
  fashion_mnist::TrainConfig config;
  CLI::App app{
      "Trains a CNN on Fashion-MNIST with cohort's DistributedDataParallel; run it under "
      "cohortrun, torchrun, srun or mpirun for several ranks."};
  app.add_option("--epochs", config.epochs, "Passes over the training set")
      ->check(kPositive)
      ->capture_default_str();
  app.add_option("--batch-size", config.batch_size, "Samples per step on each rank")
      ->check(kPositive)
      ->capture_default_str();
  app.add_option("--lr", config.lr, "Learning rate of Adam")
      ->check(kPositive)
      ->capture_default_str();
  app.add_option("--seed", config.seed, "Seed of the initial weights and of the shuffle")
      ->capture_default_str();
  app.add_option("--threads", config.threads,
                 "Torch threads per rank (0: usable cores / ranks on this node, at least 1)")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option("--max-steps", config.max_steps, "Stop after this many steps in all (0: no limit)")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option("--data", config.data_dir, "Directory of the four Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option(
         "--progress", config.progress,
         "Progress bar: auto (in place on a terminal, else a line every ~10%), bar, lines, off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->capture_default_str();
  app.add_option("--checkpoint-dir", config.checkpoint_dir,
                 "Save checkpoints here (step-<n>/ directories and a 'latest' pointer)");
  app.add_option("--checkpoint-every", config.checkpoint_every,
                 "Save a checkpoint every K steps (0: only at the end); needs --checkpoint-dir")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option("--resume", config.resume,
                 "auto: continue from the latest checkpoint in --checkpoint-dir if there is one; "
                 "never: start from scratch; or a checkpoint directory to load")
      ->capture_default_str();
  app.add_option("--zero-stage", config.zero_stage,
                 "Train with the ZeRO engine at this stage (0-3) instead of DDP (Adam at --lr)")
      ->check(CLI::Range(0, 3));
  app.add_option("--deepspeed-config", config.deepspeed_config,
                 "Train with the ZeRO engine as this DeepSpeed ds_config.json says (--zero-stage "
                 "overrides its stage)")
      ->check(CLI::ExistingFile);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; a bad command line is 2, as in cohortrun
  }

  try {
    fashion_mnist::run_training(config);
    return 0;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());  // no C++ stack trace
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
