// The files under a directory this process holds open, counted from /proc/self/fd: a swap file is
// unlinked as soon as it is open (zero/offload/swap_file.h), so the directory never lists it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace cohort::testing {

inline size_t open_files_under(const std::string& dir) {
  const std::string prefix = std::filesystem::weakly_canonical(dir).string() + "/";
  size_t count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    char target[4096];
    const ssize_t size = ::readlink(entry.path().c_str(), target, sizeof target - 1);
    if (size > 0 && std::string(target, size_t(size)).rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

}  // namespace cohort::testing
