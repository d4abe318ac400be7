// Test worker for cohortrun that does real distributed work: cohort::init() from the launcher's
// environment, then an allreduce of its rank; prints "RESULT rank=R size=W sum=S restart=N".
// --fail-rank R exits 9 on rank R in the first attempt (before init), to test a restarted world.
// --stop-rank R stops rank R (SIGSTOP) after init, so the others' allreduce times out; once it runs
// again, a SIGTERM makes it say "rank R got SIGTERM after SIGSTOP". A cohort::Error is printed as
// "ERROR <message>" (exit 1).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cohort/comm.h"
#include "cohort/world.h"

namespace {

char g_stopped_line[64];

void on_sigterm(int) {
  (void)!::write(1, g_stopped_line, std::strlen(g_stopped_line));
  ::_exit(128 + SIGTERM);
}

}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1, stop_rank = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--stop-rank") == 0) stop_rank = std::atoi(argv[i + 1]);
  }
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int restart_count = restart ? std::atoi(restart) : 0;
  const char* rank = std::getenv("RANK");
  if (rank != nullptr && std::atoi(rank) == fail_rank && restart_count == 0) {
    std::fprintf(stderr, "rank %d fails before init on purpose\n", fail_rank);
    return 9;
  }
  try {
    auto world = cohort::init();
    if (world.rank() == stop_rank) {
      std::snprintf(g_stopped_line, sizeof g_stopped_line, "rank %d got SIGTERM after SIGSTOP\n", stop_rank);
      ::signal(SIGTERM, on_sigterm);
      ::raise(SIGSTOP);
    }
    auto sum = world.comm().allreduce(torch::ones({1}) * world.rank());
    std::printf("RESULT rank=%d size=%d sum=%g restart=%d\n", world.rank(), world.size(),
                sum.item<double>(), restart_count);
  } catch (const cohort::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ERROR %s\n", e.what());
    return 1;
  }
  return 0;
}
