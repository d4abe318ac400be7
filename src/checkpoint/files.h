// The filesystem side of checkpoints: fsync of a directory after a rename, the step directories of a
// checkpoint directory, its `latest` pointer, and the confinement of every path a checkpoint names
// (`latest`, the manifest's file names) to the checkpoint's own directory (docs/security.md).
// Files are written with core/safe_file.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cohort/error.h"

namespace cohort::detail::ckpt {

/// A path a checkpoint names (its `latest`, a manifest's file name) that leads out of the checkpoint,
/// or a `latest` that is not a step-<n> name: the checkpoint is unusable, and nothing it names was
/// read. cohort-ckpt verify reports it as BAD, resume and the other commands refuse it.
class CheckpointPathError : public Error {
 public:
  using Error::Error;
};

/// fsync of a directory, so a rename inside it survives a power loss.
void sync_directory(const std::string& path);
/// (step, path) of every "step-<n>" directory in `root`, newest first. Symbolic links are left out: a
/// checkpoint's step directories are its own.
std::vector<std::pair<int64_t, std::string>> step_directories(const std::string& root);
/// The step directory `root/latest` names, as `root/step-<n>` ("" when there is no `latest`). Throws
/// CheckpointPathError naming `latest` when it is not a step-<n> name of `root` (an absolute path, '..', a
/// path with '/', a link leading out of `root`, a file of more than a few bytes), before reading
/// anything it names; what the message quotes of it is bounded.
std::string read_latest(const std::string& root);
/// The step directory a load of `root` starts from: `latest`'s, or, when that one is missing and its
/// previous copy `.step-<n>.old` (a directory, not a link) holds a manifest, that copy (a save replacing
/// the step on a filesystem that cannot swap directories was interrupted: commit.h). "" without
/// `latest`. `replaced` (optional) is set when the previous copy is taken.
std::string latest_step_to_load(const std::string& root, bool* replaced = nullptr);
/// Throws CheckpointPathError (starting with `where`) when `name`, a file name from a manifest, is not a
/// plain name inside the step directory: empty, "." or "..", with a '/' or a NUL byte.
void check_file_name(const std::string& name, const std::string& where);
/// True when `path` lies inside `dir` (or is it), both resolved (links followed where they exist).
bool path_inside(const std::string& dir, const std::string& path);
/// True when something is at `path` (links followed). Throws cohort::Error naming it when it cannot be
/// looked at (a loop of symbolic links, a directory without permission), never a filesystem_error.
bool path_exists(const std::string& path);
/// UTC now as "2024-05-01T12:00:00Z".
std::string utc_now();

}  // namespace cohort::detail::ckpt
