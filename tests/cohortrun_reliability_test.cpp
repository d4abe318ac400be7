// cohortrun's reliability cases (issue 17): two jobs started at the same moment on one port never mix
// their ranks (each runs correctly or is refused naming both jobs), unknown hosts are named at once, a
// stopped worker does not hold cohortrun for the stop timeout, and bad flag values are refused in one
// line. Short COHORT_TIMEOUTs keep every case to seconds; every address is 127.0.0.1 or unresolvable.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>

#include "cohortrun_command.h"
#include "cohortrun_test_paths.h"
#include "launch_helpers.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace cohortrun_reliability_test {

using namespace cohort::testing;
using namespace std::chrono_literals;

namespace {

// rank -> the sum its "[rankN]: RESULT rank=R size=W sum=S restart=N" line reports (size must be 2).
std::map<int, double> sums(const std::string& out) {
  std::map<int, double> found;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    int prefix = -1, rank = -1, size = 0, restart = 0;
    double sum = 0;
    if (std::sscanf(line.c_str(), "[rank%d]: RESULT rank=%d size=%d sum=%lf restart=%d", &prefix, &rank, &size,
                    &sum, &restart) == 5) {
      EXPECT_EQ(size, 2) << line;
      found[rank] = sum;
    }
  }
  return found;
}

// The job ids a refusal names, as (other job, this job), or empty when `err` holds no refusal.
std::vector<std::pair<std::string, std::string>> refusals(const std::string& err) {
  static const std::regex patterns[] = {
      std::regex("already in use on rank 0 \\(127\\.0\\.0\\.1\\) by job '([^']*)' \\(this is job '([^']*)'\\)"),
      std::regex("belongs to job '([^']*)', not to this rank's job '([^']*)'"),
  };
  std::vector<std::pair<std::string, std::string>> found;
  for (const auto& pattern : patterns) {
    for (std::sregex_iterator it(err.begin(), err.end(), pattern), end; it != end; ++it) {
      found.emplace_back((*it)[1], (*it)[2]);
    }
  }
  return found;
}

struct TempDir {
  std::string path = make_temp_dir("cohortrun_reliability_");
  ~TempDir() { remove_tree(path); }
};

int held_port(int* fd) {
  *fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  EXPECT_EQ(::bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(*fd, 16), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST(CohortrunReliability, TwoJobsOnOnePortNeverMix) {
  const Env env = clean_env({{"COHORT_TIMEOUT", "20"}});
  // 20 pairs (about 2 minutes); scripts/test.sh asks fewer of the second LibTorch's build.
  const char* pairs_text = std::getenv("COHORT_TEST_JOB_PAIRS");
  const int pairs = pairs_text != nullptr ? std::atoi(pairs_text) : 20;
  ASSERT_GE(pairs, 1) << "COHORT_TEST_JOB_PAIRS=" << pairs_text;
  for (int pair = 0; pair < pairs; ++pair) {
    SCOPED_TRACE("pair " + std::to_string(pair));
    const std::string port = std::to_string(free_port());
    // Even pairs name their jobs; odd pairs leave it to cohortrun (a fresh run id per launch).
    const auto job = [&](const std::string& name) {
      std::vector<std::string> args = {"--nproc-per-node=2", "--master-port=" + port, "--stop-timeout=5"};
      if (pair % 2 == 0) args.push_back("--rdzv-id=" + name);
      args.push_back(COHORT_COLLECTIVE_WORKER);
      return start_process(cohortrun(args), env);
    };
    Proc a = job("pair" + std::to_string(pair) + "a"), b = job("pair" + std::to_string(pair) + "b");
    const ProcResult results[] = {finish_process(a, 90s), finish_process(b, 90s)};
    int succeeded = 0;
    for (int j = 0; j < 2; ++j) {
      const ProcResult& r = results[j];
      for (const auto& [rank, sum] : sums(r.out)) EXPECT_EQ(sum, 1.0) << "mixed ranks: " << r.describe();
      if (r.code == 0) {
        EXPECT_EQ(sums(r.out).size(), 2u) << r.describe();
        ++succeeded;
        continue;
      }
      EXPECT_EQ(r.code, 1) << r.describe();
      EXPECT_EQ(r.err.find("timed out"), std::string::npos) << "refused only at the timeout: " << r.describe();
      const auto named = refusals(r.err);
      ASSERT_FALSE(named.empty()) << "a refusal must name both jobs: " << r.describe();
      for (const auto& [other, self] : named) {
        EXPECT_NE(other, self) << r.describe();
        if (pair % 2 == 0) {
          const std::string me = "pair" + std::to_string(pair) + (j == 0 ? "a" : "b");
          const std::string them = "pair" + std::to_string(pair) + (j == 0 ? "b" : "a");
          EXPECT_EQ(self, me) << r.describe();
          EXPECT_EQ(other, them) << r.describe();
        }
      }
    }
    EXPECT_GE(succeeded, 1) << results[0].describe() << results[1].describe();
  }
}

TEST(CohortrunReliability, UnresolvableRendezvousEndpointIsNamedAtOnce) {
  TempDir pids;
  const auto result = run_process(
      cohortrun({"--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=no.such.host.invalid:29400", "--rdzv-conf=join_timeout=10", COHORT_ENV_WORKER}),
      clean_env({{"COHORT_TEST_PID_DIR", pids.path}, {"OMP_NUM_THREADS", "1"}}), 60s);
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("[cohortrun] error: --rdzv-endpoint no.such.host.invalid:29400: cannot resolve host "
                            "no.such.host.invalid ("),
            std::string::npos)
      << result.describe();
  EXPECT_EQ(result.err.find("never came"), std::string::npos) << result.describe();
  EXPECT_EQ(count_of(result.err, "\n"), 1u) << result.describe();
  EXPECT_TRUE(recorded_pids(pids.path).empty());
}

TEST(CohortrunReliability, UnresolvableMasterAddrIsNamedAtOnce) {
  TempDir pids;
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--master-addr=no.such.host.invalid", COHORT_COLLECTIVE_WORKER}),
      clean_env({{"COHORT_TEST_PID_DIR", pids.path}, {"COHORT_TIMEOUT", "10"}, {"OMP_NUM_THREADS", "1"}}), 60s);
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("[cohortrun] error: --master-addr no.such.host.invalid: cannot resolve host "
                            "no.such.host.invalid ("),
            std::string::npos)
      << result.describe();
  EXPECT_EQ(count_of(result.err, "[c10d]"), 0u) << "no c10d retry lines: " << result.describe();
  EXPECT_EQ(count_of(result.err, "\n"), 1u) << result.describe();
}

TEST(CohortrunReliability, PortInUseIsOneLineWithoutC10dNoise) {
  int fd = -1;
  const int port = held_port(&fd);
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--master-port=" + std::to_string(port), "--stop-timeout=5",
                 COHORT_COLLECTIVE_WORKER}),
      clean_env({{"COHORT_TIMEOUT", "10"}}), 60s);
  ::close(fd);
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("[rank0]: ERROR [rank 0/2] MASTER_PORT=" + std::to_string(port) +
                            " is already in use on rank 0 (127.0.0.1): choose another port, or launch with "
                            "cohortrun --standalone which picks a free one"),
            std::string::npos)
      << result.describe();
  EXPECT_EQ(count_of(result.err, "[c10d]"), 0u) << "no c10d socket lines: " << result.describe();
}

TEST(CohortrunReliability, StoppedWorkerIsContinuedSoItStopsAtOnce) {
  // Rank 1 stops itself (SIGSTOP) after init; rank 0's allreduce times out. cohortrun then sends
  // SIGTERM and SIGCONT: rank 1 runs its SIGTERM handler instead of waiting for SIGKILL after
  // --stop-timeout (which would print nothing).
  const auto result = run_process(
      cohortrun({"--nproc-per-node=2", "--standalone", "--stop-timeout=20", COHORT_COLLECTIVE_WORKER,
                 "--stop-rank", "1"}),
      clean_env({{"COHORT_TIMEOUT", "3"}}), 90s);
  EXPECT_EQ(result.code, 1) << result.describe();
  EXPECT_NE(result.err.find("[rank0]: ERROR [rank 0/2] collective #0 allreduce(sum) float32 [1] timed out after "
                            "3000 ms: rank 1 never arrived."), std::string::npos) << result.describe();
  EXPECT_NE(result.out.find("[rank1]: rank 1 got SIGTERM after SIGSTOP"), std::string::npos) << result.describe();
}

TEST(CohortrunReliability, BadFlagValuesAreRefusedInOneLine) {
  TempDir pids;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node=2", "--local-ranks-filter=5", COHORT_ENV_WORKER},
       "cohortrun: error: --local-ranks-filter=5: local rank 5 does not exist (--nproc-per-node=2 starts local "
       "ranks 0..1)\n"},
      {{"--nproc-per-node=2", "--local-ranks-filter", "0,2", COHORT_ENV_WORKER},
       "cohortrun: error: --local-ranks-filter=0,2: local rank 2 does not exist (--nproc-per-node=2 starts local "
       "ranks 0..1)\n"},
      {{"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:29400",
        "--rdzv-conf=join_timeout=5,read_timout=3", COHORT_ENV_WORKER},
       "cohortrun: error: --rdzv-conf key 'read_timout' (read_timout=3) is not known; accepted keys: join_timeout, "
       "last_call_timeout\n"},
      {{"--nproc-per-node=2", "--redirects", "9:1", COHORT_ENV_WORKER},
       "cohortrun: error: --redirects=9:1: local rank 9 does not exist (--nproc-per-node=2 starts local ranks "
       "0..1)\n"},
      {{"--nproc-per-node=2", "--tee=0:3,2:1", COHORT_ENV_WORKER},
       "cohortrun: error: --tee=0:3,2:1: local rank 2 does not exist (--nproc-per-node=2 starts local ranks 0..1)\n"},
      {{"--nproc-per-node=2", "--log-dir", "/proc/nope", COHORT_ENV_WORKER},
       "cohortrun: error: --log-dir=/proc/nope: cannot create the directory: No such file or directory\n"},
      {{"--nproc-per-node=2", "--log-dir", "/dev/null", COHORT_ENV_WORKER},
       "cohortrun: error: --log-dir=/dev/null: cannot create the directory: Not a directory\n"},
      // Issue 39: a number too long for an int is out of range, not "not an integer"; the interval's
      // refusal says what is accepted (> 0), no longer ">= 0" while refusing 0.
      {{"--nproc-per-node=2", "--max-restarts", "99999999999999999999", COHORT_ENV_WORKER},
       "cohortrun: error: --max-restarts is out of range: expected an integer from 0 to 1048576, got "
       "99999999999999999999\n"},
      {{"--nproc-per-node=2", "--max-restarts", "two", COHORT_ENV_WORKER},
       "cohortrun: error: --max-restarts expects an integer from 0 to 1048576, got two\n"},
      {{"--nproc-per-node=2", "--monitor-interval", "0", COHORT_ENV_WORKER},
       "cohortrun: error: --monitor-interval=0 is not a number of seconds > 0\n"},
      {{"--nproc-per-node=2", "--monitor-interval", "inf", COHORT_ENV_WORKER},
       "cohortrun: error: --monitor-interval=inf is not a number of seconds > 0\n"},
      // Hostile pass 5, m3: past 9.2e9 s the stop deadline overflowed and the workers were killed at once.
      {{"--nproc-per-node=2", "--stop-timeout", "1e10", COHORT_ENV_WORKER},
       "cohortrun: error: --stop-timeout=1e10 is out of range: at most 31536000 seconds (a year)\n"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_process(cohortrun(args), clean_env({{"COHORT_TEST_PID_DIR", pids.path}}));
    EXPECT_EQ(result.code, 2) << result.describe();
    EXPECT_EQ(result.err.rfind(message, 0), 0u) << message << "\n" << result.describe();
    EXPECT_EQ(count_of(result.err, "\n"), 2u) << "the error and the usage hint: " << result.describe();
    EXPECT_TRUE(result.out.empty()) << result.describe();
  }
  EXPECT_TRUE(recorded_pids(pids.path).empty());
}

TEST(CohortrunReliability, NodeOfAnotherJobIsRefusedAtTheRendezvous) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const auto node = [&](const std::string& id) {
    return start_process(cohortrun({"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + endpoint, "--rdzv-id=" + id,
                                    "--rdzv-conf=join_timeout=3", COHORT_ENV_WORKER}),
                         clean_env());
  };
  Proc x = node("job-x"), y = node("job-y");
  const ProcResult rx = finish_process(x, 60s), ry = finish_process(y, 60s);
  EXPECT_EQ(rx.code, 1) << rx.describe();
  EXPECT_EQ(ry.code, 1) << ry.describe();
  // Whichever node hosts the store waits for its own job's nodes; the other is refused at once.
  const std::string refused_x = "[cohortrun] error: the store at " + endpoint +
                                " belongs to job 'job-y', not to this node's job 'job-x' (--rdzv-id): two jobs "
                                "share one rendezvous endpoint; give each its own";
  const std::string refused_y = "[cohortrun] error: the store at " + endpoint +
                                " belongs to job 'job-x', not to this node's job 'job-y' (--rdzv-id): two jobs "
                                "share one rendezvous endpoint; give each its own";
  const bool x_refused = rx.err.find(refused_x) != std::string::npos;
  const bool y_refused = ry.err.find(refused_y) != std::string::npos;
  EXPECT_NE(x_refused, y_refused) << rx.describe() << ry.describe();
  EXPECT_NE((x_refused ? ry : rx).err.find("1 of 2 nodes arrived"), std::string::npos)
      << rx.describe() << ry.describe();
}

// COHORT_JOB_SECRET set but empty meant the weak derived secret, silently (issue 39): refused before
// anything starts. A short one is warned about and used.
TEST(CohortrunReliability, AnEmptyJobSecretIsRefusedAndAShortOneWarned) {
  TempDir pids;
  const auto empty = run_process(cohortrun({"--nproc-per-node=1", "--standalone", COHORT_ENV_WORKER}),
                                 clean_env({{"COHORT_JOB_SECRET", ""}, {"COHORT_TEST_PID_DIR", pids.path}}));
  EXPECT_EQ(empty.code, 2) << empty.describe();
  EXPECT_EQ(empty.err.rfind("cohortrun: error: COHORT_JOB_SECRET is set but empty: export a random secret to every "
                            "rank (openssl rand -hex 32), or unset it to let cohortrun draw one\n",
                            0),
            0u)
      << empty.describe();
  EXPECT_TRUE(recorded_pids(pids.path).empty());
  const auto short_one = run_process(cohortrun({"--nproc-per-node=1", "--standalone", "/bin/true"}),
                                     clean_env({{"COHORT_JOB_SECRET", "abc"}}));
  EXPECT_EQ(short_one.code, 0) << short_one.describe();
  EXPECT_EQ(count_of(short_one.err, "warning: COHORT_JOB_SECRET has 3 character(s), fewer than 16: a stranger that "
                                    "records one proof can guess it offline"),
            1u)
      << short_one.describe();
}

// A grandchild that left its worker's process group (setsid) is re-parented to cohortrun, the
// subreaper, and ended with the workers; without that it ran on after cohortrun exited.
TEST(CohortrunReliability, SetsidGrandchildEndsWithTheWorkers) {
  TempDir pids;
  const auto result = run_process(
      cohortrun({"--nproc-per-node=1", "--standalone", "/bin/sh", "-c",
                 "setsid sleep 120 & echo $! > " + pids.path + "/grandchild.pid; exit 0"}),
      clean_env(), 60s);
  EXPECT_EQ(result.code, 0) << result.describe();
  const std::vector<pid_t> grandchild = recorded_pids(pids.path);
  ASSERT_EQ(grandchild.size(), 1u) << result.describe();
  const std::vector<pid_t> alive = alive_after(grandchild, 10s);
  for (pid_t pid : alive) ::kill(pid, SIGKILL);
  EXPECT_TRUE(alive.empty()) << "the setsid grandchild " << grandchild[0] << " outlived cohortrun";
}

// A log file that cannot take more (here the file size limit, as a full disk would) is said at once,
// the rest of the stream goes to the console, and the end of the job says it again.
TEST(CohortrunReliability, UnwritableLogFileIsSaidAndTheOutputKept) {
  TempDir logs;
  const auto result = run_process(
      {"/usr/bin/prlimit", "--fsize=16", COHORTRUN_PATH, "--nproc-per-node=1", "--standalone", "--redirects=1",
       "--log-dir", logs.path, "/bin/sh", "-c", "echo first line of output; echo second line"},
      clean_env(), 60s);
  EXPECT_EQ(result.code, 0) << result.describe();
  EXPECT_NE(result.err.find("[cohortrun] warning: cannot write " + logs.path), std::string::npos) << result.describe();
  EXPECT_NE(result.err.find("/attempt_0/0/stdout.log: File too large; the log file is incomplete and this stream "
                            "goes on to the console\n"),
            std::string::npos) << result.describe();
  EXPECT_NE(result.out.find("[rank0]: second line\n"), std::string::npos) << result.describe();
  EXPECT_NE(result.err.find("[cohortrun] warning: 1 worker log file(s) are incomplete (the rest went to the "
                            "console); the first: cannot write "),
            std::string::npos) << result.describe();
}

}  // namespace cohortrun_reliability_test
