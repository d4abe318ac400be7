// Directory flags of the examples (--checkpoint-dir): an empty value is refused in one line naming
// the flag (it would otherwise read as "no directory" and save nothing), and check_writable_dir makes
// the directory and proves it takes files at start, not at the first save an epoch later.
#pragma once

#include <CLI/CLI.hpp>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "cohort/error.h"

namespace examples {

inline CLI::Option* add_directory(CLI::App& app, const std::string& name, std::string& target, const std::string& help) {
  return app.add_option_function<std::string>(
      name,
      [&target, name](const std::string& text) {
        if (text.empty()) throw cohort::Error(name + " is empty: give a directory, or leave the flag out");
        target = text;
      },
      help);
}

/// --checkpoint-every K (K > 0) saves into --checkpoint-dir: without one it would save nothing.
inline void check_every_needs_dir(int64_t every, const std::string& dir) {
  if (every > 0 && dir.empty())
    throw cohort::Error("--checkpoint-every " + std::to_string(every) +
                        " needs --checkpoint-dir: without a directory nothing is saved");
}

/// Creates `dir` (and its parents) and a file in it, removed at once; throws cohort::Error naming
/// `flag`, the directory and the reason when either fails.
inline void check_writable_dir(const std::string& flag, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw cohort::Error(flag + " " + dir + ": cannot create the directory: " + error.message());
  std::string probe = dir + "/.write-test-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw cohort::Error(flag + " " + dir + ": cannot create files in it: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace examples
