// cohort::Error and COHORT_CHECK: the one way cohort reports a failure.
// Messages start with "[rank r/w]" once the process knows its rank, so a line from any rank says who
// wrote it; the text names the operation, the offending value and, where there is one, the fix.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// Thrown by every cohort function that fails. what() is the complete, rank-prefixed message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
};

namespace detail {

/// "[rank r/w] " once init() ran (or set_rank_prefix was called), else "".
std::string rank_prefix();
/// Sets the identity used by rank_prefix() and the logs.
void set_rank_identity(int rank, int size);

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace detail
}  // namespace cohort
COHORT_EXPORT_END

/// Throws cohort::Error with the streamed arguments as message when `cond` is false.
#define COHORT_CHECK(cond, ...)                                    \
  do {                                                             \
    if (!(cond)) throw ::cohort::Error(::cohort::detail::str(__VA_ARGS__)); \
  } while (0)
