// Numbers from the command line and the environment, checked in one place: the whole text must be a
// number (no empty text, no trailing junk, no silent overflow, no inf or nan), inside the range the
// setting allows. A bad value is a cohort::Error of one line naming the flag or variable, the range
// and the text given, e.g.
//   --batch-size is out of range: expected an integer from 1 to 1048576, got 99999999999999999999
//   COHORT_TIMEOUT=inf is not a number of seconds from 0.001 to 86400
// Public (owned by core, src/layers.txt) because a training program reads its own flags and variables
// with the same rules and wording as cohort's: the examples' command lines (examples/common) use it.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// An integer setting: its name in messages ("--batch-size", "COHORT_SHM_BYTES"), the inclusive
/// bounds, and what it counts ("an integer", "a number of bytes").
struct IntegerRange {
  std::string name;
  int64_t min = 0;
  int64_t max = INT64_MAX;
  std::string what = "an integer";
};

/// A real-valued setting: name, inclusive bounds, what it measures ("a number of seconds").
/// inf and nan are refused unless `allow_infinite` (then inf passes when max is inf).
struct RealRange {
  std::string name;
  double min = 0;
  double max = 0;
  std::string what = "a number";
  bool allow_infinite = false;
};

/// The integer `text` spells ("-12", "64"), checked against `range`; throws cohort::Error.
int64_t parse_integer(const std::string& text, const IntegerRange& range);
/// The real number `text` spells ("0.001", "1e-3", "300"), checked against `range`.
double parse_real(const std::string& text, const RealRange& range);

/// The environment variable range.name parsed as parse_integer does, or `fallback` when it is unset
/// or empty. Messages say "NAME=value is not <what> from <min> to <max>".
int64_t env_integer(const IntegerRange& range, int64_t fallback);
/// The environment variable range.name parsed as parse_real does, or `fallback` when unset or empty.
double env_real(const RealRange& range, double fallback);

/// "from 1 to 1048576": the range as the messages and --help texts say it.
std::string describe_range(const IntegerRange& range);
std::string describe_range(const RealRange& range);

}  // namespace cohort
COHORT_EXPORT_END
