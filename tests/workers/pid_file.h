// Shared by the cohortrun test workers: each process records its pid in $COHORT_TEST_PID_DIR as
// <rank>.<restart><suffix>.pid, so a test can check afterwards that none of them is still alive.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

inline void write_pid_file(const std::string& suffix) {
  const char* dir = std::getenv("COHORT_TEST_PID_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const char* rank = std::getenv("RANK");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const std::string path = std::string(dir) + "/" + (rank ? rank : "x") + "." +
                           (restart ? restart : "x") + suffix + ".pid";
  const std::string tmp = path + ".tmp";
  if (FILE* file = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(file, "%d\n", static_cast<int>(::getpid()));
    std::fclose(file);
    std::rename(tmp.c_str(), path.c_str());
  }
}
