// The tools' command-line errors in cohort's words, one line each ("cohort-ckpt: error: --output was
// given 2 times: give it once"), as the examples and cohortrun say them; CLI11's own text ("At Most 1
// required but received 2") and its second line ("Run with --help ...") never reach the user.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <regex>
#include <string>

namespace cohort_tools {

inline std::string parse_error_text(const CLI::ParseError& error) {
  const std::string what = error.what();
  std::smatch match;
  if (std::regex_match(what, match, std::regex("(.+): At Most 1 required but received ([0-9]+)")))
    return match[1].str() + " was given " + match[2].str() + " times: give it once";
  if (std::regex_match(what, match, std::regex("(.+): [0-9]+ required [A-Z]+ missing")))
    return match[1].str() + " needs a value";
  if (what.rfind("A subcommand", 0) == 0) return "a subcommand is required";
  if (std::regex_match(what, match, std::regex("(.+) is required"))) return match[1].str() + " is required";
  if (std::regex_match(what, match, std::regex("The following arguments? (was|were) not expected: (.+)")))
    return "unexpected argument(s): " + match[2].str();
  return what;
}

/// For `catch (const CLI::ParseError& e) { return parse_error_exit(app, e, "cohort-ckpt"); }`: --help's
/// text and 0, or the one line and 2.
inline int parse_error_exit(CLI::App& app, const CLI::ParseError& error, const char* tool) {
  if (error.get_exit_code() == 0) return app.exit(error);
  std::fprintf(stderr, "%s: error: %s (see --help)\n", tool, parse_error_text(error).c_str());
  return 2;
}

}  // namespace cohort_tools
