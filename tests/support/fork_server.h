// A fork server for the rank processes of run_ranks (multiproc.h). Loading LibTorch costs a process
// about 1 s of CPU (its static initializers: 0.9 s on this 2-core VM, with 1.13 and 2.11 alike), which
// every rank of every multi-process test paid again by re-running the test executable. The server is
// that executable started once per test process with the ranks' environment; it stops inside its static
// initialization, before main and before anything starts a thread of its own, and forks a rank per
// request: the child takes its environment and output file, returns, and runs the test as a re-run
// would (GTEST_FILTER names it). Variables that a library reads while it loads (OMP_*, OPENBLAS_*,
// LD_*, ...) keep the server's values in a fork, so ranks given their own are spawned as before.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace cohort::testing {

/// Whether ranks with these extra variables may be forks of the server: none is read at load time, and
/// COHORT_TEST_FORK_SERVER is not 0 in this process (the switch back to one executable run per rank).
bool forkable(const std::map<std::string, std::string>& extra);

/// A rank process forked from the server (started on first use): its environment exactly `env`, its
/// stdout and stderr to `out_path`, running the tests `filter` selects. -1 when the server cannot (the
/// caller then spawns the rank itself).
pid_t fork_rank(const std::vector<std::string>& env, const std::string& filter, const std::string& out_path);

/// The wait status of a rank from fork_rank once it has ended (it is the server's child, not this
/// process's); false while it runs, or when the server is gone and cannot say.
bool forked_rank_status(pid_t pid, int& status);

}  // namespace cohort::testing
