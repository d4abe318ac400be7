// Test helper: runs a shell command and returns what it printed (stdout and stderr together), for tests
// that compare cohort with a Python reference (tests/python/).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

namespace cohort::testing {

struct CommandRun {
  int code = -1;  // the exit code; -1 when it did not exit normally
  std::string out;
};

inline CommandRun run_command(const std::string& command) {
  CommandRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  for (size_t got; (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) run.out.append(buffer, got);
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) run.code = WEXITSTATUS(status);
  return run;
}

/// The number after `key` on the first line that starts with it, or -1 when there is none.
inline double value_after(const std::string& output, const std::string& key) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  return -1;
}

}  // namespace cohort::testing
