// cohortrun's elastic behaviour (torchelastic's semantics, docs/cohortrun.md "Elastic jobs"): the rules
// (when a waiting node restarts the group, what --max-restarts counts, the outcome record, the restart
// lines of the summary) alone, then real launches on one machine: a node that comes while the job
// runs joins at a restart it causes, a node lost mid-round leaves a smaller world that finishes, a job
// at its largest still refuses a late node, and a node waiting when the job ends exits with its
// result. Every launch has a deadline; none asserts on timing.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "cohortrun/membership.h"
#include "cohortrun/summary.h"
#include "cohortrun_command.h"
#include "cohortrun_test_paths.h"
#include "core/socket.h"
#include "launch_helpers.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace cohortrun_elastic_test {

using namespace cohort::detail::launch;
using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

struct TempDir {
  std::string path = make_temp_dir("cohortrun_elastic_");
  ~TempDir() { remove_tree(path); }
};

std::string endpoint() { return "127.0.0.1:" + std::to_string(free_port()); }

// Waits up to 15 s until the node hosting the rendezvous at "127.0.0.1:PORT" listens there.
bool rendezvous_listens(const std::string& endpoint) {
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (!cohort::detail::net::port_in_use(port)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The flags of one node of an elastic job at `rdzv`; more (and the program) follow.
std::vector<std::string> elastic_node(const std::string& rdzv, std::vector<std::string> more) {
  std::vector<std::string> args = {"--nnodes=1:2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                   "--rdzv-endpoint=" + rdzv, "--rdzv-id=elastic", "--monitor-interval=0.2",
                                   "--stop-timeout=2"};
  args.insert(args.end(), more.begin(), more.end());
  return cohortrun(args);
}

}  // namespace

// ---------------------------------------------------------------- rules

TEST(CohortrunElasticRules, WaitingNodesRestartAGroupThatCanGrow) {
  const NodeRange range{1, 3};
  EXPECT_TRUE(should_rescale(1, 1, range, 0));
  EXPECT_TRUE(should_rescale(2, 2, range, 0));
  EXPECT_FALSE(should_rescale(0, 1, range, 0));  // nobody waits
  EXPECT_FALSE(should_rescale(1, 3, range, 0));  // at MAX already
  EXPECT_FALSE(should_rescale(1, 1, range, 1));  // a node's workers finished: a restart would redo them
}

TEST(CohortrunElasticRules, OnlyFailuresCountAgainstMaxRestarts) {
  EXPECT_EQ(decision_after_failure(0, 1), Outcome::Kind::kRestart);
  EXPECT_EQ(decision_after_failure(1, 1), Outcome::Kind::kFail);
  EXPECT_EQ(decision_after_failure(0, 0), Outcome::Kind::kFail);
  const Outcome rescale = decode_outcome(encode_outcome({Outcome::Kind::kRescale, 1, "1 node waiting to join"}));
  EXPECT_EQ(rescale.kind, Outcome::Kind::kRescale);
  EXPECT_EQ(rescale.node, 1);
  EXPECT_EQ(rescale.description, "1 node waiting to join");
  EXPECT_STREQ(outcome_kind_name(Outcome::Kind::kRescale), "rescale");
}

TEST(CohortrunElasticRules, SummaryListsEachRestartAndItsCause) {
  EXPECT_TRUE(format_restart_history({}, 3).empty());
  const std::vector<RestartRecord> restarts = {
      {1, true, "rank 2 (local rank 0) exited with code 1 on node 0", 2, 4, 1, 2},
      {2, false, "1 node waiting to join", 1, 2, 2, 4},
      {3, true, "rank 0 (local rank 0) exited with code 7 on node 0", 2, 4, 0, 0}};
  EXPECT_EQ(format_restart_history(restarts, 3),
            (std::vector<std::string>{
                "restarts: 3 (2 after a worker failure, of --max-restarts=3; 1 to take in joining nodes)",
                "  restart 1 (worker failure): rank 2 (local rank 0) exited with code 1 on node 0; 2 nodes (world 4) "
                "-> 1 node (world 2)",
                "  restart 2 (scale-up): 1 node waiting to join; 1 node (world 2) -> 2 nodes (world 4)",
                "  restart 3 (worker failure): rank 0 (local rank 0) exited with code 7 on node 0; 2 nodes (world 4) "
                "-> no new round"}));
}

// ---------------------------------------------------------------- real launches

// A node that comes while a 1-node round runs waits for the next round; the running node sees it
// within --monitor-interval and restarts into a world of 4. --max-restarts=0: a scale-up is no failure.
TEST(CohortrunElastic, LateNodeJoinsAtTheRestartItCauses) {
  TempDir pids;
  const std::string rdzv = endpoint();
  const auto args = elastic_node(rdzv, {"--max-restarts=0", "--rdzv-conf=last_call_timeout=0.3,join_timeout=20",
                                        COHORT_ENV_WORKER, "--sleep", "5"});
  Proc first = start_process(args, clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  ASSERT_TRUE(wait_for_pid_files(pids.path, 2, 15s));
  Proc late = start_process(args, clean_env());
  const auto a = finish_process(first, 30s), b = finish_process(late, 30s);
  ASSERT_EQ(a.code, 0) << a.describe();
  ASSERT_EQ(b.code, 0) << b.describe();
  EXPECT_NE(a.err.find("[cohortrun] 1 node waiting to join: restarting the worker group to take them in (a "
                       "membership change; --max-restarts does not count it)"),
            std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("[cohortrun] restarts: 1 (0 after a worker failure, of --max-restarts=0; 1 to take in "
                       "joining nodes)\n[cohortrun]   restart 1 (scale-up): 1 node waiting to join; 1 node (world 2) "
                       "-> 2 nodes (world 4)\n"),
            std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("round 0: node 0 of 1, ranks 0..1 of 2"), std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("round 1: node 0 of 2, ranks 0..1 of 4"), std::string::npos) << a.describe();
  EXPECT_NE(b.err.find("round 1: node 1 of 2, ranks 2..3 of 4"), std::string::npos) << b.describe();
  EXPECT_EQ(b.err.find("restarts:"), std::string::npos) << b.describe();  // it saw no restart
  const auto envs = envs_from_output(a.out + b.out);  // the last environment of each rank: round 1's
  ASSERT_EQ(envs.size(), 4u) << a.describe() << b.describe();
  for (const auto& [rank, env] : envs) {
    EXPECT_EQ(env.at("WORLD_SIZE"), "4") << rank;
    EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2") << rank;
    EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "1") << rank;
  }
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
}

// Node 1's launcher dies with its workers (SIGKILL); node 0's workers then fail (here by themselves,
// as a collective on the dead peer would make them), and node 0 restarts alone after
// last_call_timeout: a world of 2 that finishes, the restart and its cause in the summary.
// last_call_timeout=5: node 1's launcher must join round 0 within it, also on a loaded machine.
TEST(CohortrunElastic, LostNodeLeavesASmallerWorldThatFinishes) {
  const std::string rdzv = endpoint();
  Proc survivor = start_process(
      elastic_node(rdzv, {"--max-restarts=1", "--rdzv-conf=last_call_timeout=5,join_timeout=20", "sh", "-c",
                          "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then sleep 4; exit 1; fi; "
                          "echo world $WORLD_SIZE restart $TORCHELASTIC_RESTART_COUNT"}),
      clean_env());
  // The survivor hosts the rendezvous: the lost node starts once it listens (a fixed wait lost this race
  // on a loaded machine, and the lost node took the store down with it).
  ASSERT_TRUE(rendezvous_listens(rdzv));
  TempDir pids;  // the lost node's workers: they end with its launcher (PR_SET_PDEATHSIG)
  Proc lost = start_process(elastic_node(rdzv, {"--rdzv-conf=join_timeout=20", COHORT_ENV_WORKER, "--sleep", "30"}),
                            clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  ASSERT_TRUE(wait_for_pid_files(pids.path, 2, 15s));
  ::kill(lost.pid, SIGKILL);
  const auto gone = finish_process(lost, 10s);
  EXPECT_EQ(gone.signal, SIGKILL) << gone.describe();
  const auto a = finish_process(survivor, 30s);
  ASSERT_EQ(a.code, 0) << a.describe();
  EXPECT_TRUE(alive_after(recorded_pids(pids.path), 2s).empty());
  EXPECT_NE(a.out.find("[rank0]: world 2 restart 1"), std::string::npos) << a.describe();
  EXPECT_NE(a.out.find("[rank1]: world 2 restart 1"), std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("[cohortrun] restarts: 1 (1 after a worker failure, of --max-restarts=1; 0 to take in "
                       "joining nodes)\n"),
            std::string::npos) << a.describe();
  EXPECT_NE(a.err.find("  restart 1 (worker failure): rank "), std::string::npos) << a.describe();
  EXPECT_NE(a.err.find(" exited with code 1 on node 0; 2 nodes (world 4) -> 1 node (world 2)\n"), std::string::npos)
      << a.describe();
}

// A job at --nnodes MAX takes no more nodes: a late one is refused in one line, the job runs on.
TEST(CohortrunElastic, JobAtItsLargestRefusesALateNode) {
  TempDir pids;
  const std::string rdzv = endpoint();
  const std::vector<std::string> args = cohortrun({"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                                   "--rdzv-endpoint=" + rdzv, "--rdzv-id=full", COHORT_ENV_WORKER,
                                                   "--sleep", "3"});
  Proc a = start_process(args, clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  Proc b = start_process(args, clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  ASSERT_TRUE(wait_for_pid_files(pids.path, 2, 15s));
  const auto late = run_process(args, clean_env());
  EXPECT_EQ(late.code, 1) << late.describe();
  EXPECT_NE(late.err.find("[cohortrun] error: this node came after rendezvous 'full' at " + rdzv +
                          " closed with 2 nodes, the most --nnodes=2 allows (a job at its largest takes no more "
                          "nodes; start it with a larger MAX)\n"),
            std::string::npos) << late.describe();
  EXPECT_EQ(finish_process(a, 20s).code, 0);
  EXPECT_EQ(finish_process(b, 20s).code, 0);
}

// A node that comes once a node's workers have finished does not restart the group (their work would be
// redone): it waits, and when the job ends it exits with the job's result, having run nothing.
TEST(CohortrunElastic, NodeWaitingWhenTheJobEndsExitsWithItsResult) {
  TempDir pids;
  const std::string rdzv = endpoint();
  const auto node = [&](std::vector<std::string> program, const Env& env) {
    // 2:3: round 0 waits for both first nodes (a fixed last call missed a launcher slow to start
    // under load, which then waited for the next round and never ran its worker).
    std::vector<std::string> args = {"--nnodes=2:3", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                     "--rdzv-endpoint=" + rdzv, "--rdzv-id=ending", "--monitor-interval=0.2",
                                     "--rdzv-conf=last_call_timeout=2,join_timeout=20"};
    args.insert(args.end(), program.begin(), program.end());
    return start_process(cohortrun(args), env);
  };
  Proc quick = node({COHORT_ENV_WORKER}, clean_env());  // hosts the rendezvous; its worker is done at once
  ASSERT_TRUE(rendezvous_listens(rdzv));
  Proc slow = node({COHORT_ENV_WORKER, "--sleep", "5"}, clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
  ASSERT_TRUE(wait_for_pid_files(pids.path, 1, 15s));
  Proc late = node({COHORT_ENV_WORKER}, clean_env());
  const auto a = finish_process(quick, 30s), b = finish_process(slow, 30s), c = finish_process(late, 30s);
  EXPECT_EQ(a.code, 0) << a.describe();
  EXPECT_EQ(b.code, 0) << b.describe();
  EXPECT_EQ(c.code, 0) << c.describe();
  EXPECT_NE(c.err.find("[cohortrun] the job ended (succeeded) while this node waited to join it; no worker ran here\n"),
            std::string::npos) << c.describe();
  EXPECT_TRUE(c.out.empty()) << c.describe();
  EXPECT_EQ((a.err + b.err).find("waiting to join"), std::string::npos) << a.describe() << b.describe();
}

}  // namespace cohortrun_elastic_test
