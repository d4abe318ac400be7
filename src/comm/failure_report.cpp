// Store-based exchange of one line per rank on the failure path (see failure_report.h).
#include "comm/failure_report.h"

#include <thread>

namespace cohort::detail {

std::vector<std::optional<std::string>> FailureReport::exchange(const std::string& line,
                                                                std::chrono::milliseconds wait) {
  std::vector<std::optional<std::string>> lines(size_);
  lines[rank_] = line;
  try {
    store_.set(prefix_ + "/" + std::to_string(rank_), std::vector<uint8_t>(line.begin(), line.end()));
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      bool all = true;
      for (int r = 0; r < size_; ++r) {
        if (lines[r]) continue;
        const std::string key = prefix_ + "/" + std::to_string(r);
        if (store_.check({key})) {
          auto raw = store_.get(key);
          lines[r] = std::string(raw.begin(), raw.end());
        } else {
          all = false;
        }
      }
      if (all || std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception&) {
    // The store is gone (rank 0 hosts it and may have died): report what we have.
  }
  return lines;
}

}  // namespace cohort::detail
