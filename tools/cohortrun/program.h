// Finds the program cohortrun is asked to run, the way execvp would (a name with a slash is a path,
// otherwise each PATH entry is tried), so that "not found" and "not executable" are reported once,
// up front, with exit code 2, instead of by every worker after the launch.
#pragma once

#include <string>

namespace cohort::detail::launch {

/// The path to execute for `program`; throws UsageError naming the program when it does not exist,
/// is a directory or is not executable.
std::string resolve_program(const std::string& program, const std::string& path_env);

/// getenv(name), or "" when unset.
std::string getenv_or_empty(const char* name);

}  // namespace cohort::detail::launch
