// Test worker for cohortrun that does real distributed work: cohort::init() from the launcher's
// environment, then an allreduce of its rank; prints "RESULT rank=R size=W sum=S restart=N".
// --fail-rank R exits 9 on rank R in the first attempt (before init), to test a restarted world.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cohort/comm.h"
#include "cohort/world.h"

int main(int argc, char** argv) {
  int fail_rank = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
  }
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int restart_count = restart ? std::atoi(restart) : 0;
  const char* rank = std::getenv("RANK");
  if (rank != nullptr && std::atoi(rank) == fail_rank && restart_count == 0) {
    std::fprintf(stderr, "rank %d fails before init on purpose\n", fail_rank);
    return 9;
  }
  auto world = cohort::init();
  auto sum = world.comm().allreduce(torch::ones({1}) * world.rank());
  std::printf("RESULT rank=%d size=%d sum=%g restart=%d\n", world.rank(), world.size(),
              sum.item<double>(), restart_count);
  return 0;
}
