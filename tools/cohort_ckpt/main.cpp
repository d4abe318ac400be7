// cohort-ckpt: what is inside a checkpoint (info), whether every byte is as saved (verify), and one
// full-state safetensors file from a sharded checkpoint (consolidate, streamed: memory bounded by a
// 4 MiB buffer, not by the model). PATH is a step directory or a checkpoint directory (its `latest`).
// Exit status: 0 fine, 1 a bad checkpoint (a path in it leading out of it included), 2 a bad command
// line (an unknown subcommand, a path without a checkpoint, an output inside a checkpoint).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "../common/cli_errors.h"
#include "checkpoint/files.h"
#include "checkpoint/inspect.h"
#include "checkpoint/manifest.h"
#include "trainer/trainer_values.h"

using namespace cohort::detail::ckpt;

namespace {

// The Trainer's own values (trainer.*, ModelCheckpoint.*, EarlyStopping.*), as a resume checks them,
// when the manifest reads.
void trainer_problems(const std::string& dir, std::vector<std::string>& problems) {
  Manifest m;
  try {
    m = read_manifest(dir + "/manifest.json");
  } catch (const std::exception&) {
    return;  // verify_checkpoint said why
  }
  try {
    cohort::detail::check_trainer_values(m.user, m.world_size);
  } catch (const std::exception& e) {
    problems.push_back(dir + "/manifest.json: " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspects, verifies and consolidates cohort checkpoints (see docs/checkpoint.md)."};
  app.require_subcommand(1);
  std::string path, out;
  bool tensors = false;
  CLI::App* info = app.add_subcommand("info", "What is inside: step, ranks, files, entries, values");
  info->add_option("path", path, "Checkpoint directory or step directory")->required();
  info->add_flag("--tensors", tensors, "Also list every tensor");
  CLI::App* verify = app.add_subcommand("verify", "Check every file and checksum against the manifest");
  verify->add_option("path", path, "Checkpoint directory or step directory")->required();
  CLI::App* consolidate = app.add_subcommand("consolidate", "Write the whole state as one safetensors file");
  consolidate->add_option("path", path, "Checkpoint directory or step directory")->required();
  consolidate->add_option("-o,--output", out, "The file to write (e.g. model.safetensors)")->required();
  if (const int code = cohort_tools::unknown_subcommand_exit(app, argc, argv, "cohort-ckpt"); code >= 0) return code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cohort_tools::parse_error_exit(app, e, "cohort-ckpt");
  }
  std::string dir;
  try {
    dir = resolve_step_dir(path);
    if (*consolidate) check_output_outside(dir, out);
  } catch (const CheckpointPathError& e) {  // `latest` leads out of the checkpoint: a bad checkpoint
    if (*verify) {
      std::fprintf(stderr, "cohort-ckpt: %s\n", e.what());
      std::printf("%s: BAD (1 problem(s))\n", path.c_str());
    } else {
      std::fprintf(stderr, "cohort-ckpt: error: %s\n", e.what());
    }
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-ckpt: error: %s\n", e.what());
    return 2;  // the command line names no checkpoint, or an output that would overwrite it
  }
  try {
    if (*info) {
      std::fputs(describe_checkpoint(dir, tensors).c_str(), stdout);
    } else if (*verify) {
      auto problems = verify_checkpoint(dir);
      trainer_problems(dir, problems);
      for (const std::string& problem : problems) std::fprintf(stderr, "cohort-ckpt: %s\n", problem.c_str());
      if (!problems.empty()) {
        std::printf("%s: BAD (%zu problem(s))\n", dir.c_str(), problems.size());
        return 1;
      }
      // Hostile pass 7, M3 (and pass 11, M-e; pass 12, M-4): version 1 has no checksum of the numbers,
      // 2 none of the tensor records, 3 no count of an optimizer's parameters: an edit there cannot be
      // seen, so OK says what it covers.
      const int version = cohort::detail::ckpt::read_manifest(dir + "/manifest.json").format_version;
      if (version < 3)
        std::printf(
            "%s: OK (every file matches the manifest; format version %d carries no checksum of its %s, "
            "so an edit of them cannot be seen)\n",
            dir.c_str(), version, version < 2 ? "numbers" : "tensor records");
      else if (version < 4)
        std::printf(
            "%s: OK (every file and checksum matches the manifest; format version 3 does not count an "
            "optimizer's parameters, so the deletion of one's whole state cannot be seen)\n",
            dir.c_str());
      else std::printf("%s: OK (every file and checksum matches the manifest)\n", dir.c_str());
    } else {
      const int64_t count = consolidate_checkpoint(dir, out);
      std::printf("wrote %s: %lld tensors from %s\n", out.c_str(), static_cast<long long>(count), dir.c_str());
      // The bytes are checked on the way; numbers a resume refuses are copied as saved, and said
      // (hostile pass 11, m-c: a position past the data went into the file without a word).
      auto problems = value_problems(dir);
      trainer_problems(dir, problems);
      for (const std::string& problem : problems)
        std::fprintf(stderr, "cohort-ckpt: warning: %s (copied into the metadata as saved; a resume refuses it)\n",
                     problem.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-ckpt: error: %s\n", e.what());
    return 1;
  }
}
