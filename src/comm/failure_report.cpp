// Store-based exchange of one line per rank on the failure path (see failure_report.h).
#include "comm/failure_report.h"

#include <algorithm>
#include <thread>

namespace cohort::detail {
namespace {

// Sets a store's timeout (every request of cohort's store, CohortStore, is bounded by it) for as long
// as it lives. The store is shared with the Comm's other users; this runs only while the Comm fails.
class StoreTimeout {
 public:
  StoreTimeout(c10d::Store& store, std::chrono::milliseconds timeout) : store_(store), old_(store.getTimeout()) {
    store_.setTimeout(timeout);
  }
  ~StoreTimeout() { store_.setTimeout(old_); }
  StoreTimeout(const StoreTimeout&) = delete;
  StoreTimeout& operator=(const StoreTimeout&) = delete;

 private:
  c10d::Store& store_;
  std::chrono::milliseconds old_;
};

}  // namespace

std::vector<std::optional<std::string>> FailureReport::exchange(const std::string& line,
                                                                std::chrono::milliseconds wait) {
  std::vector<std::optional<std::string>> lines(size_);
  lines[rank_] = line;
  try {
    // A partition leaves the store silent: without this the first request waits the store's whole
    // timeout (COHORT_TIMEOUT), doubling the time a cut-off rank takes to fail.
    const StoreTimeout bounded(store_, std::max(wait, std::chrono::milliseconds(1)));
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

std::string join_on_hosts(const std::vector<RankOnHost>& ranks, bool name_hosts) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i ? ", " : "") + ranks[i].label;
    const bool run_ends = i + 1 == ranks.size() || ranks[i + 1].host != ranks[i].host;
    if (name_hosts && run_ends) out += " (host " + ranks[i].host + ")";
  }
  return out;
}

}  // namespace cohort::detail
