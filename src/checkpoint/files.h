// Small filesystem steps of the checkpoint protocol that must be durable: write a file and fsync it,
// fsync a directory after a rename, read the `latest` pointer, list the step directories.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail::ckpt {

/// Writes `text` to `path` via `path.tmp`, fsync and rename (readers see the old file or the new).
void write_file_atomically(const std::string& path, const std::string& text);
/// fsync of a directory, so a rename inside it survives a power loss.
void sync_directory(const std::string& path);
/// (step, path) of every "step-<n>" directory in `root`, newest first.
std::vector<std::pair<int64_t, std::string>> step_directories(const std::string& root);
/// The directory name in `root/latest` ("" when there is no such file).
std::string read_latest(const std::string& root);
/// UTC now as "2024-05-01T12:00:00Z".
std::string utc_now();

}  // namespace cohort::detail::ckpt
