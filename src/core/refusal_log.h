// The log of a server's refused connections (rank 0's rendezvous store): the first few refusals in
// full, then at most one line per interval that counts the refusals since and shows the latest, so a
// stranger flooding the port cannot flood the log (it wrote 11,333 lines in 3 s, issue 39). Pure: the
// caller passes the time and logs the lines it gets back.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort::detail {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  /// Refusals logged in full in a quiet period, before counting starts: a few strangers, each with
  /// its own reason, are all named; a flood is not.
  static constexpr int kInFull = 5;

  /// `where` starts every line ("rendezvous store at 127.0.0.1:29500"); `interval` is the least time
  /// between two lines once counting started.
  RefusalLog(std::string where, std::chrono::milliseconds interval);

  /// A refusal of `peer` (ADDRESS:PORT) for `why` at `now`: the line to log now, or "" when it is only
  /// counted, for the next summary.
  std::string refused(const std::string& peer, const std::string& why, Clock::time_point now);
  /// The summary of the refusals counted so far, once `interval` has passed since the last summary (or
  /// since the period began); else "".
  std::string due(Clock::time_point now);
  /// The summary of the refusals counted so far, whatever the time ("" when none): for a server that
  /// stops.
  std::string flush(Clock::time_point now);

 private:
  std::string summary(Clock::time_point now);

  std::string where_;
  std::chrono::milliseconds interval_;
  std::optional<Clock::time_point> since_;  // the start of this period, or of its last summary
  int in_full_ = 0;                         // refusals logged in full in this period
  int64_t counted_ = 0;                     // refusals counted since `since_`
  std::string latest_;                      // "PEER: why" of the newest of them
};

}  // namespace cohort::detail
