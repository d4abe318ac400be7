// cohort-trace summary FILE [--csv]: where each rank's time went in a timeline written with
// COHORT_TIMELINE (docs/timeline.md): per rank and per step, compute, communication, the part of it
// hidden under compute, the exposed part, and idle time waiting for the slowest rank (named).
// Exit status: 0 fine, 1 a file that cannot be read or is not a timeline, 2 a bad command line.
// Every error is one line naming the file (never the JSON library's own text, core/json_read.h).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../common/cli_errors.h"
#include "core/json_read.h"
#include "core/trace_summary.h"

namespace {

// The file's JSON, or a one-line reason why not (no file, not a regular file, not JSON, nested deeper
// than any timeline: a 200 KB file of '[' once overflowed the stack when its event was quoted).
nlohmann::json read_trace(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error) throw std::runtime_error("cannot open: " + error.message());
  if (!std::filesystem::is_regular_file(status)) throw std::runtime_error("not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("cannot read");
  cohort::detail::JsonReadOptions options;
  options.source = "not a cohort timeline";
  return cohort::detail::parse_json(text, options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Summarises a cohort timeline (COHORT_TIMELINE=trace.json; see docs/timeline.md)."};
  app.require_subcommand(1);
  std::string path;
  bool csv = false;
  CLI::App* summary = app.add_subcommand("summary", "Compute, communication, overlap and idle time per rank and step");
  summary->add_option("file", path, "The trace JSON rank 0 wrote")->required();
  summary->add_flag("--csv", csv, "Comma-separated values with a header line, for plotting");
  if (const int code = cohort_tools::unknown_subcommand_exit(app, argc, argv, "cohort-trace"); code >= 0) return code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cohort_tools::parse_error_exit(app, e, "cohort-trace");
  }
  try {
    const auto trace = read_trace(path);
    const auto steps = cohort::detail::trace::summarize(trace);
    // Hostile pass 7, M2: a trace of other events printed a bare header and exit 0.
    if (steps.empty())
      throw cohort::Error(
          "it holds no step of a cohort timeline (no 'step' span of a cohort category): is it a file "
          "COHORT_TIMELINE wrote?",
          cohort::ErrorKind::kInvalidArgument);
    std::fputs(cohort::detail::trace::format_summary(steps, csv).c_str(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-trace: error: %s: %s\n", path.c_str(), e.what());
    return 1;
  }
  return 0;
}
