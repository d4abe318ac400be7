// Runs a test body on N local ranks: the test executable re-runs itself once per rank (filtered to the
// calling test) with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set and a fresh port, then collects each
// rank's exit status, output and report lines. A rank is a fork of a fork server (fork_server.h: the
// executable started once, stopped before main), not of the test process: torch's thread pools do not
// survive fork, and a server that never ran a test has none.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cohort::testing {

struct RankResult {
  int rank = 0;
  int exit_code = -1;                // exit status, or -1 when killed by a signal
  int signal = 0;                    // the signal that ended it, or 0
  bool passed = false;               // exit code 0
  std::string output;                // stdout and stderr together
  std::vector<std::string> reports;  // lines the rank passed to report()
};

struct RanksOptions {
  std::chrono::seconds deadline{60};       // every rank is SIGKILLed after this
  std::map<std::string, std::string> env;  // extra variables for every rank
  bool expect_all_pass = true;             // add a test failure for each rank that did not pass
  int local_size = 0;  // ranks per simulated node, numbered node by node (GROUP_RANK); 0: one node
};

/// True in a rank process started by run_ranks.
bool is_rank_process();

/// A directory every rank of one run_ranks call shares: the test process makes it (/tmp/<prefix>XXXXXX)
/// and passes it in `options.env[variable]`; a rank process reads it back from there. The test process
/// removes it when done.
std::string shared_temp_dir(RanksOptions& options, const std::string& variable, const std::string& prefix);

/// In the test process: starts `n` rank processes running this test, each calling body(rank, n),
/// waits for all and returns their results. In a rank process: calls body and exits (status 1 if
/// the body recorded a test failure). One call per TEST: a rank process re-runs the test from its
/// start and runs the body of the first call it meets, so a second call's ranks would run the first's.
std::vector<RankResult> run_ranks(int n, const std::function<void(int rank, int size)>& body,
                                  const RanksOptions& options = {});

/// From a rank process: hands a line to the test process (RankResult::reports).
void report(const std::string& line);

/// A TCP port that was free a moment ago on 127.0.0.1, outside the range outgoing connections take theirs from.
int free_port();

/// Output of all ranks, for failure messages.
std::string describe(const std::vector<RankResult>& results);

/// What one of cohort's command-line tools did: exit code and stdout+stderr.
struct ToolRun {
  int code = 0;
  std::string out;
};
/// Runs the tool at `relative` under the build directory (COHORT_BUILD_DIR as ctest sets it, else the
/// folder above this test executable's), e.g. run_tool("tools/cohort_ckpt/cohort-ckpt", "verify dir").
ToolRun run_tool(const std::string& relative, const std::string& args);

}  // namespace cohort::testing
