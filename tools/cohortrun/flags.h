// cohortrun's command line: torchrun's flags, spelled with `-` or `_`, as `--flag value` or
// `--flag=value`, unique prefixes accepted (argparse does), PET_* environment defaults; then the
// program and its arguments (`--` optional). Parsing is split in two steps so each is tested alone.
#pragma once

#include <string>
#include <vector>

#include "cohortrun/flag_values.h"
#include "cohortrun/options.h"

namespace cohort::detail::launch {

/// The command line cut at the program: normalized flags ("--name", then its value if it takes one)
/// and the program with its arguments.
struct CommandLine {
  std::vector<std::string> flags;
  std::vector<std::string> program;  // empty when none was given
};

/// Cuts `args` (without argv[0]) into flags and program. Flag names are normalized: `_` -> `-`,
/// `--a=b` -> `--a` `b`, unique prefixes and -r/-t/-m/-h expanded. Throws UsageError on an unknown
/// or ambiguous flag or a flag without its value.
CommandLine split_command_line(const std::vector<std::string>& args);

/// What parse_command_line produced: the options, or the help text when --help was asked.
struct ParsedCommandLine {
  LaunchOptions options;
  std::string help;  // non-empty: print it and exit 0
};

/// Parses and checks the whole command line (flags with CLI11, values with flag_values.h, defaults
/// from PET_* variables like torchrun) and resolves the program. Throws UsageError on bad input.
ParsedCommandLine parse_command_line(const std::vector<std::string>& args, const HostFacts& host);

/// Fills the derived fields (endpoint, standalone, timeouts) and checks combinations of flags.
void resolve_options(LaunchOptions& options);

/// One line for the usage hint after an error.
const char* usage_hint();

}  // namespace cohort::detail::launch
