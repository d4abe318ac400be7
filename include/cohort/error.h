// cohort::Error: the one way cohort reports a failure (cohort raises it with COHORT_CHECK_KIND, an
// internal macro in src/core/check.h, which gives every error its kind).
// Messages start with "[rank r/w]" once the process knows its rank, so a line from any rank says who
// wrote it; the text names the operation, the offending value and, where there is one, the fix.
// kind() says what went wrong and ranks() who was involved, so a caller can decide without reading
// the text (docs/errors.md: which kinds to retry).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// What went wrong, set where cohort knows it (docs/errors.md says which to retry).
enum class ErrorKind {
  kOther,            ///< none of the kinds below, or not known where the error was raised
  kInvalidArgument,  ///< a value passed in is refused: a bug in the caller, retrying cannot help
  kTimeout,          ///< a wait passed its deadline; ranks() are the ranks that were waited for
  kPeerDied,         ///< a peer's process exited or was killed (or left); ranks() names it
  kAborted,          ///< a peer failed first and aborted the Comm (ranks() names it), or this rank did
  kDesync,           ///< ranks called different collectives or disagree on a value: a bug
  kIO,               ///< a file could not be read or written, or its bytes are damaged (checksum)
  kOutOfMemory,      ///< memory (host or device) ran out, or a request would not fit what is there
  kInternal,         ///< an invariant of cohort's own failed: a bug in cohort, to report
};

/// "timeout", "peer died", ... : the kind as messages and logs name it.
const char* error_kind_name(ErrorKind kind);

/// Thrown by every cohort function that fails. what() is the complete, rank-prefixed message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
  /// An error of a known kind; `ranks` are the world ranks involved (the dead peer, the ranks waited
  /// for, the ranks that disagree), empty when none is known.
  Error(const std::string& message, ErrorKind kind, std::vector<int> ranks = {});

  ErrorKind kind() const { return kind_; }
  /// The world ranks involved, ascending; empty when the error is this rank's alone or none is known.
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  ErrorKind kind_ = ErrorKind::kOther;
  std::vector<int> ranks_;
};

/// The signal (SIGTERM, SIGINT) that asked this process to stop, once cohort took it to hand a timeline over
/// before ending by it; else 0. A failure after it (a peer that stopped first) is the stop's
/// consequence: its Error says "stopped by SIGTERM", and a program's main need not report it as a fault.
int stop_signal();

namespace detail {

/// "[rank r/w] " once init() ran (or set_rank_prefix was called), else "".
std::string rank_prefix();
/// Sets the identity used by rank_prefix() and the logs.
void set_rank_identity(int rank, int size);

}  // namespace detail
}  // namespace cohort
COHORT_EXPORT_END
