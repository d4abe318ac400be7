// One rank of tests/mpirun_test.cpp: a plain (non-MPI) program that Open MPI's mpirun starts. It calls
// cohort::init() with no options and no MASTER_* variables, so rank, size, address and port all come
// from what mpirun exports (the port derived from the job id), then allreduces its rank and prints one
// line for the test to check. Exit status 0 only when every check held.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cohort/comm.h"
#include "cohort/world.h"

namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? -1 : std::atoi(value);
}

}  // namespace

int main() {
  try {
    auto world = cohort::init();
    bool ok = world.launcher() == "openmpi";
    ok = ok && world.rank() == env_int("OMPI_COMM_WORLD_RANK");
    ok = ok && world.size() == env_int("OMPI_COMM_WORLD_SIZE");
    ok = ok && world.master_port() >= 20000 && world.master_port() < 60000;  // derived, not MASTER_PORT
    auto value = torch::full({4}, int64_t(world.rank()), torch::kInt64);
    world.comm().allreduce(value);
    const int64_t sum = value[0].item<int64_t>();
    const int64_t n = world.size();
    ok = ok && value.eq(n * (n - 1) / 2).all().item<bool>();
    std::printf("mpi_allreduce_worker rank=%d size=%d launcher=%s port=%d sum=%lld %s\n", world.rank(),
                world.size(), world.launcher().c_str(), world.master_port(), (long long)sum,
                ok ? "ok" : "FAILED");
    std::fflush(stdout);
    world.comm().barrier();  // neither rank shuts its Comm down while the other still reduces
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_allreduce_worker: %s\n", e.what());
    return 1;
  }
}
