// After a collective fails, each rank posts one line about itself (its collective and fingerprint) to
// the store and reads the others', so the error every rank raises can say what each rank was doing.
// Only used on the failure path; a rank that does not report within the wait is "(no report)".
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

  /// Posts `line` for this rank and returns every rank's line (nullopt: none within `wait`).
  std::vector<std::optional<std::string>> exchange(const std::string& line, std::chrono::milliseconds wait);

 private:
  c10d::Store& store_;
  std::string prefix_;
  int rank_, size_;
};

}  // namespace cohort::detail
