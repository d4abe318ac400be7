// The rate-limited log of refused connections (see refusal_log.h). A period starts at a refusal after
// a quiet interval (none counted); its first kInFull refusals are logged in full, the rest counted and
// summed up once per interval. A summary spends the period's full lines, so a flood that goes on is
// one line per interval.
#include "core/refusal_log.h"

#include <cstdio>
#include <utility>

namespace cohort::detail {

RefusalLog::RefusalLog(std::string where, std::chrono::milliseconds interval)
    : where_(std::move(where)), interval_(interval) {}

std::string RefusalLog::refused(const std::string& peer, const std::string& why, Clock::time_point now) {
  const bool expired = !since_ || now - *since_ >= interval_;
  if (expired && counted_ == 0) {  // quiet for an interval: a new period
    since_ = now;
    in_full_ = 0;
  }
  if (in_full_ < kInFull) {
    ++in_full_;
    return where_ + ": refused " + peer + ": " + why;
  }
  ++counted_;
  latest_ = peer + ": " + why;
  return expired ? summary(now) : "";
}

std::string RefusalLog::due(Clock::time_point now) {
  if (counted_ == 0 || (since_ && now - *since_ < interval_)) return "";
  return summary(now);
}

std::string RefusalLog::flush(Clock::time_point now) { return counted_ == 0 ? "" : summary(now); }

std::string RefusalLog::summary(Clock::time_point now) {
  const double seconds = since_ ? std::chrono::duration<double>(now - *since_).count() : 0.0;
  char span[32];
  std::snprintf(span, sizeof span, "%.1f", seconds);
  const std::string line = where_ + ": refused " + std::to_string(counted_) + " more connection" +
                           (counted_ == 1 ? "" : "s") + " in the last " + span + " s (the latest: " + latest_ + ")";
  since_ = now;
  in_full_ = kInFull;
  counted_ = 0;
  latest_.clear();
  return line;
}

}  // namespace cohort::detail
