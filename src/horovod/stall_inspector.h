// Horovod's stall inspector for cohort::hvd. Every rank numbers its operations (the handles, equal on
// every rank that issues the same operations) and a background thread posts how many it has
// submitted to the store about once a second. When one of this rank's operations has waited longer
// than HOROVOD_STALL_CHECK_TIME_SECONDS, it reads the others' counts and warns, naming each rank that
// has not submitted it yet and the tensors it is missing - well before cohort's timeout turns the
// wait into an error.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cohort::hvd::detail {

struct StallConfig {
  int rank = 0;
  int size = 1;
  double seconds = 60;                        // the warning threshold
  std::chrono::milliseconds timeout{300000};  // cohort's, quoted in the warning
};

/// A rank that has submitted fewer operations than the stalled one, and the names it lacks.
struct MissingRank {
  int rank = -1;
  std::vector<std::string> names;
};

/// Who is missing, given each rank's submitted count (-1: unknown, counts as 0) and this rank's
/// waiting operations by number: ranks whose count does not reach `oldest`, with the names from their
/// count on. Pure, so it is tested alone.
std::vector<MissingRank> missing_ranks(const std::vector<int64_t>& submitted, int self,
                                       const std::map<int64_t, std::string>& waiting, int64_t oldest);

/// The warning's text for `missing` (Horovod's "Missing ranks: 1: [a, b]" shape).
std::string stall_warning(const std::vector<MissingRank>& missing, const StallConfig& config);

class StallInspector {
 public:
  StallInspector(c10::intrusive_ptr<c10d::Store> store, StallConfig config);
  ~StallInspector();
  StallInspector(const StallInspector&) = delete;
  StallInspector& operator=(const StallInspector&) = delete;

  /// Operation `number` (this rank's n-th) named `name` was submitted / has finished here.
  void submitted(int64_t number, const std::string& name);
  void finished(int64_t number);

 private:
  struct Waiting {
    std::string name;
    std::chrono::steady_clock::time_point since;
    bool warned = false;
  };
  void run();
  /// Looks for operations waiting too long; warns once for them.
  void inspect();
  std::vector<int64_t> read_counts();

  c10::intrusive_ptr<c10d::Store> store_;
  StallConfig config_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<int64_t, Waiting> waiting_;
  int64_t submitted_ = 0, posted_ = -1;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace cohort::hvd::detail
