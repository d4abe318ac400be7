// Test worker for cohortrun that fails on purpose: rank --fail-rank writes --stderr-lines lines to
// stderr and exits with --exit-code (or raises --signal) while TORCHELASTIC_RESTART_COUNT is below
// --fail-until-restart; the other ranks sleep --sleep seconds. Optional: ignore SIGTERM, report it,
// or leave a child process behind, to test how cohortrun stops groups.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "pid_file.h"

namespace {

int g_rank = 0;

void on_term(int sig) {
  char line[96];
  const int n = std::snprintf(line, sizeof line, "rank %d got signal %d\n", g_rank, sig);
  (void)!::write(1, line, static_cast<size_t>(n));
  ::_exit(0);
}

// With $COHORT_TEST_PID_DIR: waits (10 s at most) until every rank of this attempt wrote its pid file.
void wait_for_all_pid_files(int restart) {
  const char* dir = std::getenv("COHORT_TEST_PID_DIR");
  const char* world = std::getenv("WORLD_SIZE");
  if (dir == nullptr || world == nullptr) return;
  for (int waited = 0; waited < 1000; ++waited) {
    int missing = 0;
    for (int rank = 0; rank < std::atoi(world); ++rank) {
      const std::string path = std::string(dir) + "/" + std::to_string(rank) + "." +
                               std::to_string(restart) + ".pid";
      missing += ::access(path.c_str(), F_OK) != 0;
    }
    if (missing == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1, exit_code = 1, fail_signal = 0, stderr_lines = 3, fail_until = 1 << 30;
  double sleep_seconds = 60, fail_after = 0.2;
  bool ignore_term = false, report_term = false, spawn_child = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&] { return i + 1 < argc ? argv[++i] : "0"; };
    if (arg == "--fail-rank") fail_rank = std::atoi(next());
    else if (arg == "--exit-code") exit_code = std::atoi(next());
    else if (arg == "--signal") fail_signal = std::atoi(next());
    else if (arg == "--stderr-lines") stderr_lines = std::atoi(next());
    else if (arg == "--fail-until-restart") fail_until = std::atoi(next());
    else if (arg == "--sleep") sleep_seconds = std::atof(next());
    else if (arg == "--fail-after") fail_after = std::atof(next());
    else if (arg == "--ignore-sigterm") ignore_term = true;
    else if (arg == "--report-signals") report_term = true;
    else if (arg == "--spawn-child") spawn_child = true;
  }
  g_rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  const char* restart_text = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int restart = std::atoi(restart_text ? restart_text : "0");
  if (report_term) {
    ::signal(SIGTERM, on_term);
    ::signal(SIGINT, on_term);
  }
  if (ignore_term) ::signal(SIGTERM, SIG_IGN);
  if (spawn_child) {
    int ready[2];
    if (::pipe(ready) != 0) return 99;
    if (::fork() == 0) {
      write_pid_file(".child");
      ::close(ready[1]);  // the parent goes on once the child's pid is on record
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char byte;
    (void)!::read(ready[0], &byte, 1);
    ::close(ready[0]);
  }
  write_pid_file("");
  std::printf("rank %d restart %d started\n", g_rank, restart);
  std::fflush(stdout);
  if (g_rank == fail_rank && restart < fail_until) {
    wait_for_all_pid_files(restart);  // every rank is on record before the group is stopped
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(fail_after * 1000)));
    for (int i = 0; i < stderr_lines; ++i) std::fprintf(stderr, "rank %d stderr line %d\n", g_rank, i);
    std::fflush(stderr);
    if (fail_signal != 0) {
      ::signal(fail_signal, SIG_DFL);
      ::raise(fail_signal);
    }
    return exit_code;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(sleep_seconds * 1000)));
  std::printf("rank %d restart %d done\n", g_rank, restart);
  return 0;
}
