// The report cohortrun prints when a worker group fails for good, modelled on torchrun's
// ChildFailedError: the first failure as the root cause (rank, exit code or signal, pid, time,
// last lines of its stderr), then any other failure of the same attempt; and the list of the
// restarts a launch went through (elastic ones included), each with its cause and the world it made.
#pragma once

#include <string>
#include <vector>

#include "cohortrun/supervisor.h"

namespace cohort::detail::launch {

struct SummaryInput {
  std::string program;
  std::string host;  // this machine's name
  int node_rank = 0;
  int restarts = 0;  // restarts done before this final attempt
  int max_restarts = 0;
  std::vector<WorkerFailure> failures;  // [0] is the root cause
};

/// One restart of the worker group as this node saw it.
struct RestartRecord {
  int round = 0;        // the round it started (restart N starts round N)
  bool failure = true;  // a worker failed (counts against --max-restarts); else nodes joined
  std::string cause;    // the outcome's description
  int nodes_before = 0, world_before = 0;
  int nodes_after = 0, world_after = 0;  // 0: the round never closed
};

/// The lines cohortrun's summary gives the restarts (empty when there were none): a count, then
/// one line per restart, e.g. "  restart 1 (worker failure): rank 2 ... on node 0; 2 nodes (world
/// 4) -> 1 node (world 2)".
std::vector<std::string> format_restart_history(const std::vector<RestartRecord>& restarts, int max_restarts);

/// One line: "rank 1 (local rank 1) exited with code 3".
std::string describe_failure(const WorkerFailure& failure);

/// The multi-line summary (ends with a newline).
std::string format_failure_summary(const SummaryInput& input);

}  // namespace cohort::detail::launch
