// What the fuzz targets share: the readers under test take a path, so each input is written to a
// private file in /dev/shm first (no disk I/O per execution), and a reader may only ever fail with
// cohort::Error: any other exception escapes to libFuzzer, which reports it with the input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace cohort_fuzz {

/// Writes `size` bytes to /dev/shm/cohort-fuzz-<pid>-<name> and returns the path (rewritten per input).
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = "/dev/shm/cohort-fuzz-" + std::to_string(getpid()) + "-" + name;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);
  return path;
}

}  // namespace cohort_fuzz
