// What the GPT benchmarks read of their own process: a /proc/self/status field (VmRSS, VmHWM) in MiB.
#pragma once

#include <fstream>
#include <string>

inline double status_mib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return 0;
}
