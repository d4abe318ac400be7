// Small text helpers for messages and strict parsing, shared by every reader of user input
// (environment variables, host lists, flags).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail {

/// The value as a message shows it: on one line, control characters escaped as \xNN.
std::string printable(const std::string& value);

/// What a message may quote of an input that can be any size (a file's contents, a JSON value): its
/// first `max_chars` characters as printable() shows them, then "... (N bytes)" when there is more.
std::string excerpt(const std::string& value, size_t max_chars = 200);

/// A tensor shape as messages write it: "[2, 3]".
std::string shape_text(const std::vector<int64_t>& shape);

/// A double as messages and listings write it without losing it: an integral value below 2^63 in
/// magnitude as an integer ("2318941", not %g's "2.31894e+06"), any other in the fewest digits
/// that read back to the same double ("0.1", "1e-05", "1.1805916207174113e+21").
std::string number_text(double value);

/// True when `s` is one or more decimal digits and nothing else.
bool all_digits(const std::string& s);

}  // namespace cohort::detail
