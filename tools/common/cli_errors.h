// The tools' command-line errors in cohort's words, one line each ("cohort-ckpt: error: --output was
// given 2 times: give it once"), as the examples and cohortrun say them; CLI11's own text ("At Most 1
// required but received 2") and its second line ("Run with --help ...") never reach the user.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

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

/// A first argument that is neither a flag nor one of `app`'s subcommands: one line naming it and the
/// known ones ("cohort-trace: error: unknown subcommand 'bogus': expected summary") and 2; CLI11
/// would say only "A subcommand is required". -1 when the first argument is fine.
inline int unknown_subcommand_exit(CLI::App& app, int argc, char** argv, const char* tool) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first.empty() || first[0] == '-') return -1;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == first) return -1;
    names.push_back(sub->get_name());
  }
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i)
    expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  std::fprintf(stderr, "%s: error: unknown subcommand '%s': expected %s\n", tool, first.c_str(), expected.c_str());
  return 2;
}

}  // namespace cohort_tools
