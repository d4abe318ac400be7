// Path flags of the examples. Directories (--checkpoint-dir): an empty value is refused in one line
// naming the flag (it would otherwise read as "no directory" and save nothing), and check_writable_dir
// makes the directory and proves it takes files at start, not at the first save an epoch later. Files
// read whole (gpt --data): regular files only, up to a size, as cohort-plan reads --checkpoint; a file
// read later (--deepspeed-config) must exist and be a regular file when the command line is read.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "cohort/error.h"

namespace examples {

inline CLI::Option* add_directory(CLI::App& app, const std::string& name, std::string& target,
                                  const std::string& help) {
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
  // A dangling link or a file in the way: said as such (create_directories would say "File exists").
  const auto status = std::filesystem::symlink_status(dir, error);
  if (std::filesystem::is_symlink(status) && !std::filesystem::exists(dir, error))
    throw cohort::Error(flag + " " + dir + " is a link to " + std::filesystem::read_symlink(dir, error).string() +
                            ", which does not exist",
                        cohort::ErrorKind::kInvalidArgument);
  if (std::filesystem::exists(dir, error) && !std::filesystem::is_directory(dir, error))
    throw cohort::Error(flag + " " + dir + " is not a directory", cohort::ErrorKind::kInvalidArgument);
  std::filesystem::create_directories(dir, error);
  if (error)
    throw cohort::Error(flag + " " + dir + ": cannot create the directory: " + error.message(), cohort::ErrorKind::kIO);
  std::string probe = dir + "/.write-test-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw cohort::Error(flag + " " + dir + ": cannot create files in it: " + std::strerror(errno),
                        cohort::ErrorKind::kIO);
  ::close(fd);
  ::unlink(probe.c_str());
}

// What a file that is not a regular one is, for messages.
inline std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

/// A flag naming a file read later (--deepspeed-config): it must exist and be a regular file, checked
/// as the command line is read with stat, which neither opens nor blocks (a fifo or a device is
/// refused here, not hung on or read without end later).
inline CLI::Option* add_existing_file(CLI::App& app, const std::string& name, std::string& target,
                                      const std::string& help) {
  return app.add_option_function<std::string>(
      name,
      [&target, name](const std::string& path) {
        const auto refusal = [&](const std::string& why) {
          return cohort::Error(name + " " + (path.empty() ? std::string("\"\"") : path) + why,
                               cohort::ErrorKind::kInvalidArgument);
        };
        struct stat info {};
        if (::stat(path.c_str(), &info) != 0)
          throw refusal(errno == ENOENT ? " does not exist" : std::string(": ") + std::strerror(errno));
        if (!S_ISREG(info.st_mode)) throw refusal(" is " + file_kind(info.st_mode) + ", not a regular file");
        target = path;
      },
      help);
}

/// The whole of `path`, a regular file of at most `max_bytes`; throws cohort::Error (invalid argument)
/// naming `flag` and the path otherwise. A device such as /dev/zero would be read until memory runs
/// out and a fifo would block forever, so the file is opened without blocking and checked first, and
/// no more bytes are read than its size said then.
inline std::string read_regular_file(const std::string& flag, const std::string& path, int64_t max_bytes) {
  const auto refusal = [&](const std::string& why) {
    return cohort::Error(flag + " " + path + why, cohort::ErrorKind::kInvalidArgument);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw refusal(std::string(": cannot open: ") + std::strerror(errno));
  struct stat info {};
  const bool regular = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  if (!regular || info.st_size > max_bytes) {
    ::close(fd);
    if (!regular) throw refusal(" is " + file_kind(info.st_mode) + ", not a regular file");
    throw refusal(" holds " + std::to_string(info.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                  " this program reads whole into memory");
  }
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  int error = 0;
  while (done < bytes.size() && error == 0) {
    const ssize_t got = ::read(fd, &bytes[done], bytes.size() - done);
    if (got < 0 && errno != EINTR) error = errno;
    if (got == 0) break;  // the file shrank: what is there
    if (got > 0) done += static_cast<size_t>(got);
  }
  ::close(fd);
  if (error != 0) throw refusal(std::string(": cannot read: ") + std::strerror(error));
  bytes.resize(done);
  return bytes;
}

}  // namespace examples
