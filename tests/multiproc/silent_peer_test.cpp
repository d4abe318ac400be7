// A rank whose peer falls silent, store and all, as across a network partition (rank 0, which hosts
// the store, is stopped with SIGSTOP: its sockets stay open and nothing answers), fails once
// COHORT_TIMEOUT has passed plus the failure report's short wait, naming the silent rank; not after a
// second COHORT_TIMEOUT spent waiting on the silent store (comm/failure_report.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace silent_peer_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kTimeoutSeconds = 15;

// Rank 1's side: waits (bounded) for rank 0's pid, runs a collective rank 0 never joins, reports the
// error and the seconds it took, then ends rank 0.
void fail_against_silent_rank(cohort::Comm& comm, const std::string& pid_file) {
  pid_t silent = 0;
  for (int i = 0; i < 300 && silent == 0; ++i) {
    std::ifstream(pid_file) >> silent;
    if (silent == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(silent, 0) << "rank 0 wrote no pid into " << pid_file;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 stops itself meanwhile
  const auto start = Clock::now();
  try {
    comm.allreduce(torch::ones({8}));
    ADD_FAILURE() << "expected a cohort::Error";
  } catch (const cohort::Error& e) {
    report(e.what());
    report("seconds=" + std::to_string(std::chrono::duration<double>(Clock::now() - start).count()));
  }
  ::kill(silent, SIGKILL);
}

}  // namespace

TEST(SilentPeer, FailsOneTimeoutAfterThePeerFellSilent) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = std::to_string(kTimeoutSeconds);
  options.deadline = std::chrono::seconds(90);
  options.expect_all_pass = false;  // rank 0 ends by SIGKILL
  const std::string dir = cohort::testing::shared_temp_dir(options, "SILENT_PEER_DIR", "cohort-silent-peer-");
  const auto results = run_ranks(2, [&dir](int rank, int) {
    auto& comm = cohort::init().comm();
    comm.barrier();  // both ranks are done setting up before rank 0 falls silent
    const std::string pid_file = dir + "/rank0.pid";
    if (rank == 1) return fail_against_silent_rank(comm, pid_file);
    {
      std::ofstream out(pid_file + ".tmp");
      out << ::getpid();
    }
    std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
    ::raise(SIGSTOP);  // silent until rank 1 ends it
  }, options);
  if (cohort::testing::is_rank_process()) return;
  EXPECT_EQ(results[0].signal, SIGKILL) << results[0].output;
  const auto& r = results[1];
  EXPECT_TRUE(r.passed) << r.output;
  ASSERT_EQ(r.reports.size(), 2u) << r.output;
  EXPECT_THAT(r.reports[0], HasSubstr("collective #1 allreduce(sum) float32 [8] timed out after 15000 ms: "
                                      "rank 0 never arrived."));
  // One timeout plus the report's 2 s wait; a second timeout on the silent store would take 30 s.
  const double seconds = std::stod(r.reports[1].substr(8));
  EXPECT_GE(seconds, kTimeoutSeconds) << r.reports[1];
  EXPECT_LT(seconds, kTimeoutSeconds + 9) << r.reports[1];
}

}  // namespace silent_peer_test
