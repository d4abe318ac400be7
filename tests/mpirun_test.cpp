// Open MPI's mpirun as a launcher: `mpirun -np 2` starts tests/workers_mpi/mpi_allreduce_worker, which
// joins with a bare cohort::init() (rank and size from OMPI_COMM_WORLD_*, the port derived from the
// job id mpirun exports) and allreduces its rank. Checks both ranks' result lines and exit code 0.
// Open MPI is a dependency (scripts/install-deps.sh): a missing mpirun fails, it does not skip.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <regex>
#include <string>

#include "mpi_worker_path.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace mpirun_test {

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

// Runs `command` through the shell, stdout and stderr together.
Outcome run(const std::string& command) {
  Outcome out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out.output += buffer;
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

TEST(Mpirun, TwoRanksFindEachOtherAndAllreduce) {
  ASSERT_EQ(run("command -v mpirun").exit_code, 0)
      << "mpirun not found: install Open MPI (scripts/install-deps.sh installs openmpi-bin)";
  // The workers must learn everything from mpirun, so variables of an outer launcher are removed.
  // --allow-run-as-root: containers often run tests as root, which Open MPI refuses by default.
  // --oversubscribe: 2 ranks even on a machine with fewer free slots.
  // Debian's Open MPI 4.1 needs no OMPI_MCA_* settings here: the workers never call MPI_Init, so no
  // BTL (vader's single-copy mechanism) is involved, and a one-node launch starts no rsh/ssh agent.
  // `timeout` bounds a hung rendezvous; -k kills mpirun if it ignores SIGTERM.
  const std::string command =
      "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "
      "-u GROUP_RANK -u TORCHELASTIC_RUN_ID -u SLURM_PROCID -u PMI_RANK -u PMI_SIZE "
      "timeout -k 10 60 mpirun --allow-run-as-root --oversubscribe -np 2 " MPI_ALLREDUCE_WORKER_PATH;
  const Outcome outcome = run(command);
  ASSERT_EQ(outcome.exit_code, 0) << command << "\n" << outcome.output;

  const std::regex line(
      R"(mpi_allreduce_worker rank=(\d+) size=(\d+) launcher=(\S+) port=(\d+) sum=(-?\d+) (ok|FAILED))");
  std::map<int, std::smatch> by_rank;
  auto begin = std::sregex_iterator(outcome.output.begin(), outcome.output.end(), line);
  for (auto it = begin; it != std::sregex_iterator(); ++it) by_rank[std::stoi((*it)[1])] = *it;
  ASSERT_EQ(by_rank.size(), 2u) << "expected one result line from each of ranks 0 and 1:\n" << outcome.output;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(by_rank.count(rank)) << "no line from rank " << rank << ":\n" << outcome.output;
    const auto& m = by_rank[rank];
    EXPECT_EQ(m[2].str(), "2") << outcome.output;
    EXPECT_EQ(m[3].str(), "openmpi") << outcome.output;
    EXPECT_EQ(m[5].str(), "1") << "sum of ranks 0 + 1:\n" << outcome.output;
    EXPECT_EQ(m[6].str(), "ok") << outcome.output;
  }
  // Both ranks derived the same port from the job id, without MASTER_PORT.
  EXPECT_EQ(by_rank[0][4].str(), by_rank[1][4].str()) << outcome.output;
}

}  // namespace mpirun_test
