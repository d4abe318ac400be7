// After a collective fails, each rank posts one line about itself (its collective and fingerprint) to
// the store and reads the others', so the error every rank raises can say what each rank was doing.
// Only used on the failure path; a rank that does not report within the wait is "(no report)".
// Also how such an error names ranks with the hosts they run on.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace cohort::detail {

class FailureReport {
 public:
  FailureReport(c10d::Store& store, std::string prefix, int rank, int size)
      : store_(store), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

  /// Posts `line` for this rank and returns every rank's line (nullopt: none within `wait`). Every
  /// store call is bounded by `wait` too, so a store cut off by a partition costs `wait`, not the
  /// store's own timeout.
  std::vector<std::optional<std::string>> exchange(const std::string& line, std::chrono::milliseconds wait);

 private:
  c10d::Store& store_;
  std::string prefix_;
  int rank_, size_;
};

/// A rank an error names: its label ("2", or "rank 3 (group rank 1 of 'g')") and its host.
struct RankOnHost {
  std::string label;
  std::string host;
};

/// The labels joined with ", ", each run of ranks on one host followed by " (host H)" when
/// `name_hosts`: "2, 3 (host n2)", "0, 1 (host n1), 3 (host n2)"; without hosts "2, 3".
std::string join_on_hosts(const std::vector<RankOnHost>& ranks, bool name_hosts);

}  // namespace cohort::detail
