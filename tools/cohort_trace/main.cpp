// cohort-trace summary FILE [--csv]: where each rank's time went in a timeline written with
// COHORT_TIMELINE (docs/timeline.md): per rank and per step, compute, communication, the part of it
// hidden under compute, the exposed part, and idle time waiting for the slowest rank (named).
// Exit status: 0 fine, 1 a file that cannot be read or is not a timeline, 2 a bad command line.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/trace_summary.h"

int main(int argc, char** argv) {
  CLI::App app{"Summarises a cohort timeline (COHORT_TIMELINE=trace.json; see docs/timeline.md)."};
  app.require_subcommand(1);
  std::string path;
  bool csv = false;
  CLI::App* summary = app.add_subcommand("summary", "Compute, communication, overlap and idle time per rank and step");
  summary->add_option("file", path, "The trace JSON rank 0 wrote")->required();
  summary->add_flag("--csv", csv, "Comma-separated values with a header line, for plotting");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "cohort-trace: error: cannot open %s\n", path.c_str());
      return 1;
    }
    const auto trace = nlohmann::json::parse(in);
    std::fputs(cohort::detail::trace::format_summary(cohort::detail::trace::summarize(trace), csv).c_str(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-trace: error: %s: %s\n", path.c_str(), e.what());
    return 1;
  }
  return 0;
}
