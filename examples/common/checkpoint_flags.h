// The checkpoint flags every example shares: --checkpoint-dir (a directory, refused when empty),
// --checkpoint-every (0 to 1e12 steps) and --resume (auto, never or a checkpoint directory; refused
// when empty), with the same words in each example's --help.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_numbers.h"
#include "cli_paths.h"
#include "cohort/error.h"

namespace examples {

/// What an example saves and resumes from; its flags fill it.
struct CheckpointFlags {
  std::string dir;              ///< "": no checkpoints
  int64_t every = 0;            ///< steps between checkpoints (0: only at the end)
  std::string resume = "auto";  ///< auto, never, or a checkpoint directory
  bool async = false;           ///< write in the background (SaveOptions::async)

  /// --checkpoint-every or --async-checkpoint without --checkpoint-dir is refused (nothing would be saved).
  void check() const {
    check_every_needs_dir(every, dir);
    if (async && dir.empty())
      throw cohort::Error("--async-checkpoint needs --checkpoint-dir: without a directory nothing is saved");
  }
  /// The Trainer's FitOptions::ckpt_path: "last" (the newest in dir, if any) for auto, "" for never.
  std::string trainer_ckpt_path() const {
    if (resume == "auto") return dir.empty() ? "" : "last";
    return resume == "never" ? "" : resume;
  }
};

/// How an example's checkpoints differ in its --help: what a step directory holds, and whether a
/// launcher's restart resumes by itself.
struct CheckpointHelp {
  std::string holds;            ///< e.g. "each stage's shard; " (before "step-<n>/ directories")
  bool restart_resumes = true;  ///< a launcher's restart continues from the newest one
};

inline void add_checkpoint_flags(CLI::App& app, CheckpointFlags& flags, const CheckpointHelp& help = {}) {
  add_directory(app, "--checkpoint-dir", flags.dir,
                "Save checkpoints here (" + help.holds + "step-<n>/ directories and a 'latest' pointer)");
  add_integer(app, {"--checkpoint-every", 0, int64_t(1e12)}, flags.every,
              "Save a checkpoint every K steps (0: only at the end); needs --checkpoint-dir");
  app.add_flag("--async-checkpoint", flags.async,
               "Write each checkpoint in the background once the state is copied: a step waits only for the "
               "copy (and for the previous save when it is still being written)");
  // An empty --resume (--resume "$CKPT" with CKPT unset) would read as auto: refused like --checkpoint-dir.
  app.add_option_function<std::string>(
         "--resume",
         [&flags](const std::string& text) {
           if (text.empty())
             throw cohort::Error("--resume is empty: give auto, never or a checkpoint directory, or leave the flag out",
                                 cohort::ErrorKind::kInvalidArgument);
           // A checkpoint to load is looked for now, not after the workers start (hostile pass 16, m-1). Not on
           // a launcher's restart: that continues this job's own checkpoints, though retention removed this one.
           const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
           if (text != "auto" && text != "never" && (restart == nullptr || std::string(restart) == "0")) {
             std::error_code error;
             const auto status = std::filesystem::status(text, error);
             if (!std::filesystem::exists(status))
               throw cohort::Error("--resume " + text + ": no such checkpoint directory",
                                   cohort::ErrorKind::kInvalidArgument);
             if (!std::filesystem::is_directory(status))
               throw cohort::Error("--resume " + text +
                                       ": not a directory (give a checkpoint directory or one of its step-<n> "
                                       "directories)",
                                   cohort::ErrorKind::kInvalidArgument);
           }
           flags.resume = text;
         },
         std::string("auto: continue from the latest checkpoint in --checkpoint-dir if there is one; never: "
                     "start from scratch") +
             (help.restart_resumes ? " (a launcher's restart continues from the newest one this job saved)"
                                   : " (a launcher's restart runs this again: only auto continues it from the newest one)") +
             "; or a checkpoint directory to load")
      ->default_str(flags.resume);
}

}  // namespace examples
