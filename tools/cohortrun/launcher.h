// cohortrun's top level: parse the command line, then round after round rendezvous, run the local
// worker group and act on how it ended (restart while --max-restarts allows, else fail with a
// summary). Exit codes: 0 success, 1 a worker or the rendezvous failed, 2 bad command line,
// 128+N when cohortrun itself got signal N (forwarded to every worker first).
#pragma once

#include <string>
#include <vector>

#include "cohortrun/options.h"

namespace cohort::detail::launch {

/// main() of cohortrun.
int cohortrun_main(int argc, char** argv);

/// Runs the launch described by parsed options; returns the exit code.
int run_launch(const LaunchOptions& options);

}  // namespace cohort::detail::launch
