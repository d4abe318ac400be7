// The tools' command-line errors in cohort's words, one line each ("cohort-ckpt: error: --output was
// given 2 times: give it once"), as the examples and cohortrun say them; CLI11's own text ("At Most 1
// required but received 2") and its second line ("Run with --help ...") never reach the user.
#pragma once

#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

namespace cohort_tools {

// CLI11's messages matched by hand (std::regex cost each tool 14 s of compile time per build).
inline bool all_of_class(const std::string& text, int (*is_class)(int)) {
  if (text.empty()) return false;
  for (const char c : text)
    if (!is_class(static_cast<unsigned char>(c))) return false;
  return true;
}

// "<name>: <rest>" split at the last ": " before `marker`; false when `marker` is not there.
inline bool split_before(const std::string& what, const std::string& marker, std::string& name, std::string& rest) {
  const size_t at = what.find(marker);
  if (at == std::string::npos || at == 0) return false;
  name = what.substr(0, at);
  rest = what.substr(at + marker.size());
  return true;
}

inline std::string parse_error_text(const CLI::ParseError& error) {
  const std::string what = error.what();
  std::string name, rest;
  // "<name>: At Most 1 required but received <n>"
  if (split_before(what, ": At Most 1 required but received ", name, rest) && all_of_class(rest, ::isdigit))
    return name + " was given " + rest + " times: give it once";
  // "<name>: <n> required <TYPE> missing"
  const size_t required = what.find(" required ");
  const size_t colon = required == std::string::npos ? std::string::npos : what.rfind(": ", required);
  if (colon != std::string::npos && colon > 0 && what.size() > 8 && what.compare(what.size() - 8, 8, " missing") == 0 &&
      all_of_class(what.substr(colon + 2, required - colon - 2), ::isdigit) &&
      all_of_class(what.substr(required + 10, what.size() - 8 - required - 10), ::isupper))
    return what.substr(0, colon) + " needs a value";
  if (what.rfind("A subcommand", 0) == 0) return "a subcommand is required";
  const std::string is_required = " is required";
  if (what.size() > is_required.size() &&
      what.compare(what.size() - is_required.size(), is_required.size(), is_required) == 0)
    return what.substr(0, what.size() - is_required.size()) + " is required";
  for (const char* lead : {"The following argument was not expected: ", "The following arguments were not expected: "})
    if (what.rfind(lead, 0) == 0 && what.size() > std::string(lead).size())
      return "unexpected argument(s): " + what.substr(std::string(lead).size());
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
