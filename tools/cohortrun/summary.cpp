// Failure summary text (see summary.h). Pure formatting, so its shape is tested without processes.
#include "cohortrun/summary.h"

#include <sstream>

namespace cohort::detail::launch {
namespace {

const char* kRule = "============================================================\n";
const char* kThin = "------------------------------------------------------------\n";

void write_failure(std::ostringstream& out, const WorkerFailure& f, const SummaryInput& input) {
  out << "  rank       : " << f.rank << " (local_rank: " << f.local_rank << ", node_rank: " << input.node_rank << ")\n";
  out << "  host       : " << input.host << "\n";
  if (f.status.exited) {
    out << "  exitcode   : " << f.status.code << " (pid: " << f.pid << ")\n";
  } else {
    out << "  signal     : " << f.status.signal << " (" << signal_name(f.status.signal) << ", pid: " << f.pid << ")\n";
  }
  out << "  time       : " << f.time << "\n";
  if (!f.error_message.empty()) out << "  error      : " << f.error_message << "\n";
  if (f.stderr_tail.empty()) {
    out << "  stderr     : <empty>\n";
  } else {
    out << "  stderr (last " << f.stderr_tail.size() << " lines):\n";
    for (const auto& line : f.stderr_tail) out << "    " << line << "\n";
  }
}

std::string nodes_and_world(int nodes, int world) {
  return std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") + " (world " + std::to_string(world) + ")";
}

}  // namespace

std::vector<std::string> format_restart_history(const std::vector<RestartRecord>& restarts, int max_restarts) {
  if (restarts.empty()) return {};
  int failures = 0;
  for (const auto& r : restarts) failures += r.failure ? 1 : 0;
  const int joins = static_cast<int>(restarts.size()) - failures;
  std::vector<std::string> lines;
  lines.push_back("restarts: " + std::to_string(restarts.size()) + " (" + std::to_string(failures) +
                  " after a worker failure, of --max-restarts=" + std::to_string(max_restarts) + "; " +
                  std::to_string(joins) + " to take in joining nodes)");
  for (const auto& r : restarts) {
    std::string line = "  restart " + std::to_string(r.round) + (r.failure ? " (worker failure): " : " (scale-up): ") +
                       r.cause + "; " + nodes_and_world(r.nodes_before, r.world_before) + " -> ";
    line += r.nodes_after > 0 ? nodes_and_world(r.nodes_after, r.world_after) : "no new round";
    lines.push_back(line);
  }
  return lines;
}

std::string describe_failure(const WorkerFailure& failure) {
  return "rank " + std::to_string(failure.rank) + " (local rank " + std::to_string(failure.local_rank) + ") " +
         failure.status.describe();
}

std::string format_failure_summary(const SummaryInput& input) {
  std::ostringstream out;
  out << kRule << input.program << " FAILED";
  if (input.max_restarts > 0) {
    out << " after " << input.restarts << " of " << input.max_restarts << " restarts";
  }
  out << "\n" << kThin;
  if (input.failures.empty()) {
    out << "  <no local failure recorded>\n";
  } else {
    out << "Root Cause (first observed failure): " << describe_failure(input.failures[0]) << "\n";
    write_failure(out, input.failures[0], input);
    out << kThin << "Other Failures:\n";
    if (input.failures.size() == 1) out << "  <NO_OTHER_FAILURES>\n";
    for (size_t i = 1; i < input.failures.size(); ++i) {
      out << "[" << i << "]: " << describe_failure(input.failures[i]) << "\n";
      write_failure(out, input.failures[i], input);
    }
  }
  out << kRule;
  return out.str();
}

}  // namespace cohort::detail::launch
