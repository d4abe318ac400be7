// A way out of init's wait for the other ranks, for a launcher inside this process: while a
// ScopedArrivalCheck lives, init() on its thread asks `check` as it waits for every rank to arrive
// (wait_for_all_ranks); a non-empty answer ends the wait at once with that message. The Trainer's
// self-launcher answers with a worker's exit: a rank whose process has ended will never arrive, and
// waiting for it until COHORT_TIMEOUT would only hide why.
#pragma once

#include <functional>
#include <string>

namespace cohort::detail {

class ScopedArrivalCheck {
 public:
  explicit ScopedArrivalCheck(std::function<std::string()> check);
  ~ScopedArrivalCheck();
  ScopedArrivalCheck(const ScopedArrivalCheck&) = delete;
  ScopedArrivalCheck& operator=(const ScopedArrivalCheck&) = delete;

 private:
  std::function<std::string()> previous_;
};

/// The answer of this thread's check: why a rank will never arrive; "" without a check or a reason.
std::string arrival_failure();

}  // namespace cohort::detail
