// The report cohortrun prints when a worker group fails for good, modelled on torchrun's
// ChildFailedError: the first failure as the root cause (rank, exit code or signal, pid, time,
// last lines of its stderr), then any other failure of the same attempt.
#pragma once

#include <string>
#include <vector>

#include "cohortrun/supervisor.h"

namespace cohort::detail::launch {

struct SummaryInput {
  std::string program;
  std::string host;        // this machine's name
  int node_rank = 0;
  int restarts = 0;        // restarts done before this final attempt
  int max_restarts = 0;
  std::vector<WorkerFailure> failures;  // [0] is the root cause
};

/// One line: "rank 1 (local rank 1) exited with code 3".
std::string describe_failure(const WorkerFailure& failure);

/// The multi-line summary (ends with a newline).
std::string format_failure_summary(const SummaryInput& input);

}  // namespace cohort::detail::launch
