// examples::require: the examples' one-line check. cohort's own COHORT_CHECK is internal to the library
// (src/core/check.h); a program using cohort throws cohort::Error itself, as this does, so its
// failures read like cohort's ("[rank r/w] --chunks 9 is more than --batch-size 8: ...").
#pragma once

#include <cohort/error.h>

#include <sstream>

namespace examples {

/// Throws cohort::Error (kind kInvalidArgument: a flag or input the run cannot use) with the streamed
/// `message` parts as its text when `ok` is false.
template <typename... Parts>
void require(bool ok, const Parts&... message) {
  if (ok) return;
  std::ostringstream out;
  (out << ... << message);
  throw cohort::Error(out.str(), cohort::ErrorKind::kInvalidArgument);
}

}  // namespace examples
