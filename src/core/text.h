// Small text helpers for messages and strict parsing, shared by every reader of user input
// (environment variables, host lists, flags).
#pragma once

#include <string>

namespace cohort::detail {

/// The value as a message shows it: on one line, control characters escaped as \xNN.
std::string printable(const std::string& value);

/// True when `s` is one or more decimal digits and nothing else.
bool all_digits(const std::string& s);

}  // namespace cohort::detail
