// cohortrun with workers that really communicate: cohort::init() reads the environment cohortrun
// sets and an allreduce of the ranks must give 0 + 1 + ... + (w-1) on every rank, on one node, on
// two launchers forming one world, after a restart (fresh MASTER_PORT), and across two network
// namespaces (different node addresses).
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>
#include <sstream>

#include "cohortrun_command.h"
#include "cohortrun_test_paths.h"
#include "launch_helpers.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace cohortrun_collective_test {

using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

struct Reported {
  int size = 0;
  double sum = 0;
  int restart = 0;
};

// rank -> what its "[rankN]: RESULT rank=R size=W sum=S restart=N" line says.
std::map<int, Reported> results(const std::string& out) {
  std::map<int, Reported> found;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    int prefix = -1, rank = -1;
    Reported r;
    if (std::sscanf(line.c_str(), "[rank%d]: RESULT rank=%d size=%d sum=%lf restart=%d", &prefix,
                    &rank, &r.size, &r.sum, &r.restart) == 5) {
      EXPECT_EQ(prefix, rank) << line;
      found[rank] = r;
    }
  }
  return found;
}

void expect_world(const std::map<int, Reported>& found, int size, int restart = 0) {
  ASSERT_EQ(found.size(), static_cast<size_t>(size));
  for (const auto& [rank, r] : found) {
    EXPECT_EQ(r.size, size) << "rank " << rank;
    EXPECT_EQ(r.sum, size * (size - 1) / 2.0) << "rank " << rank;
    EXPECT_EQ(r.restart, restart) << "rank " << rank;
  }
}

}  // namespace

// Hostile pass 16, S-2: torchrun's restart count is each node's own and may differ between nodes (a
// node that rejoins counts from 0); cohort put it in the store's key prefix, so such ranks never met and
// waited out COHORT_TIMEOUT. Two ranks started as torchrun's agents would, counts 1 and 0, now meet.
TEST(CohortrunCollective, RanksWhoseRestartCountsDifferMeet) {
  const std::string port = std::to_string(free_port());
  std::vector<Proc> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.push_back(start_process(
        {COHORT_COLLECTIVE_WORKER},
        clean_env({{"RANK", std::to_string(rank)}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "1"},
                   {"GROUP_RANK", std::to_string(rank)}, {"GROUP_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", port}, {"TORCHELASTIC_RESTART_COUNT", rank == 0 ? "1" : "0"},
                   {"TORCHELASTIC_MAX_RESTARTS", "3"}, {"TORCHELASTIC_RUN_ID", "none"},
                   {"TORCHELASTIC_USE_AGENT_STORE", "False"}, {"COHORT_TIMEOUT", "20"}})));
  for (int rank = 0; rank < 2; ++rank) {
    const ProcResult result = finish_process(ranks[rank], 60s);
    EXPECT_EQ(result.code, 0) << result.describe();
    EXPECT_NE(result.out.find("RESULT rank=" + std::to_string(rank) + " size=2 sum=1"), std::string::npos)
        << result.describe();
  }
}

TEST(CohortrunCollective, StandaloneWorldAllreduces) {
  const auto result = run_process(
      cohortrun({"--standalone", "--nnodes=1", "--nproc_per_node=3", COHORT_COLLECTIVE_WORKER}),
      clean_env(), 60s);
  ASSERT_EQ(result.code, 0) << result.describe();
  expect_world(results(result.out), 3);
}

TEST(CohortrunCollective, TwoLaunchersFormOneWorld) {
  const std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  const auto node = [&] {
    return start_process(cohortrun({"--nnodes=2", "--nproc_per_node=2", "--rdzv_id=allreduce",
                                    "--rdzv_backend=c10d", "--rdzv_endpoint=" + rdzv,
                                    COHORT_COLLECTIVE_WORKER}), clean_env());
  };
  Proc a = node(), b = node();
  const auto ra = finish_process(a, 60s), rb = finish_process(b, 60s);
  ASSERT_EQ(ra.code, 0) << ra.describe();
  ASSERT_EQ(rb.code, 0) << rb.describe();
  expect_world(results(ra.out + rb.out), 4);
}

TEST(CohortrunCollective, RestartedWorldAllreduces) {
  const auto result = run_process(
      cohortrun({"--standalone", "--nproc-per-node=2", "--max-restarts=1", "--stop-timeout=5",
                 COHORT_COLLECTIVE_WORKER, "--fail-rank", "1"}),
      clean_env(), 60s);
  ASSERT_EQ(result.code, 0) << result.describe();
  expect_world(results(result.out), 2, 1);
  EXPECT_NE(result.err.find("rank 1 fails before init on purpose"), std::string::npos);
}

TEST(CohortrunCollective, TwoNetworkNamespacesAllreduce) {
  ASSERT_EQ(::geteuid(), 0u) << "the network-namespace test must run as root (ip netns add)";
  TwoNamespaces namespaces;
  ASSERT_EQ(namespaces.error(), "");
  const auto node = [&](const std::string& ns) {
    return start_process(TwoNamespaces::node_argv(ns, COHORTRUN_PATH, 30, {COHORT_COLLECTIVE_WORKER}), clean_env());
  };
  Proc b = node(namespaces.b()), a = node(namespaces.a());
  const auto ra = finish_process(a, 60s), rb = finish_process(b, 60s);
  ASSERT_EQ(ra.code, 0) << ra.describe();
  ASSERT_EQ(rb.code, 0) << rb.describe();
  expect_world(results(ra.out + rb.out), 4);
  EXPECT_EQ(results(ra.out).count(0), 1u) << "the node hosting the rendezvous is node 0";
}

}  // namespace cohortrun_collective_test
