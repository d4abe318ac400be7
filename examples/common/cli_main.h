// The examples' main() tail: parse the command line, run, and turn every failure into one "error:"
// line and an exit status (0 done or --help, 2 a bad command line as in cohortrun, 1 a failed run).
// CLI11's own refusals (a flag given twice, an unknown flag, a stray argument) are said in cohort's
// words too, naming the flag and the value, never as CLI11's two lines.
#pragma once

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/world.h"
#include "command_line_error.h"

namespace examples {

/// Throws cohort::Error when a flag that takes a value is given more than once: CLI11 would say "At
/// Most 1 required but received 2", and taking either value silently could run another job than the
/// one asked for (a script that appends its own --max-steps).
inline void refuse_repeated_flags(const CLI::App& app, int argc, char** argv) {
  std::map<std::string, std::vector<std::string>> values;  // by the option's name, in the order given
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // the rest is positional
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const CLI::Option* option = app.get_option_no_throw(arg.substr(0, eq));
    if (option == nullptr || option->get_expected_max() == 0) continue;  // unknown (refused below) or a switch
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      value = argv[++i];
    } else {
      throw cohort::Error(option->get_name() + " needs a value (see --help)");
    }
    values[option->get_name()].push_back(value.empty() ? "\"\"" : value);
  }
  for (const auto& [name, given] : values) {
    if (given.size() < 2) continue;
    std::string list;
    for (const auto& value : given) list += (list.empty() ? "" : ", ") + value;
    throw cohort::Error(name + " was given " + std::to_string(given.size()) + " times (" + list + "): give it once");
  }
}

/// The one line for what CLI11 found left over: an unknown flag or an argument no flag takes.
inline std::string extras_refusal(const CLI::App& app) {
  std::vector<std::string> extras = app.remaining();
  extras.erase(std::remove(extras.begin(), extras.end(), "--"), extras.end());  // "--" itself is no argument
  if (extras.empty()) return "unexpected arguments (see --help)";
  const std::string& first = extras.front();
  const bool flag = first.size() > 1 && first[0] == '-' && !(first[1] >= '0' && first[1] <= '9');
  if (flag) return "unknown flag " + first.substr(0, first.find('=')) + " (see --help)";
  return "unexpected argument " + (first.empty() ? std::string("\"\"") : first) + " (see --help)";
}

inline int parse_and_run(CLI::App& app, int argc, char** argv, const std::function<void()>& run) {
  try {
    refuse_repeated_flags(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    std::fprintf(stderr, "error: %s\n", extras_refusal(app).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);              // --help
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());  // one line, not CLI11's two
    return 2;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());  // a number out of range: cohort/number.h's line
    return 2;
  }
  // Asked to stop (cohort took a SIGTERM to hand the timeline over): what failed meanwhile (a peer that
  // stopped first) is no fault to report; the process ends by the signal, as it would without a timeline.
  const auto report = [](const char* what) {
    if (cohort::stop_signal() == 0) std::fprintf(stderr, "error: %s\n", what);
  };
  try {
    run();
    return 0;
  } catch (const CommandLineError& e) {
    if (!cohort::is_initialized() || cohort::current_world().is_main()) std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    report(e.what_without_backtrace());  // no C++ stack trace
  } catch (const std::exception& e) {
    report(e.what());
  }
  return 1;
}

}  // namespace examples
