// The examples' main() tail: parse the command line, run, and turn every failure into one "error:"
// line and an exit status (0 done or --help, 2 a bad command line as in cohortrun, 1 a failed run).
#pragma once

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>
#include <functional>

#include "cohort/error.h"

namespace examples {

inline int parse_and_run(CLI::App& app, int argc, char** argv, const std::function<void()>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());  // a number out of range: cohort/number.h's line
    return 2;
  }
  try {
    run();
    return 0;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());  // no C++ stack trace
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

}  // namespace examples
