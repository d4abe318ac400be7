// Unbound ranks of one host (no --bind-cores, `mpirun --bind-to none`) that the scheduler left on one
// CPU after a sleep: each wait for the other then costs a context switch, and Linux's balancer, which
// treats both as cache-hot, may leave them together for seconds while another CPU idles (bench/allreduce
// --mode alone read 9 us instead of 2 for a 4 KiB allreduce for a whole run). A rank whose wait finds a
// peer on its own CPU moves itself to an allowed CPU that no rank last ran on, then restores its
// affinity mask exactly: the scheduler stays free to place it afterwards.
#pragma once

#include <chrono>
#include <vector>

namespace cohort::detail {

class CpuSpread {
 public:
  /// Moves the calling thread off CPU `here` to one in its affinity mask that is not in `used` (the
  /// CPUs the ranks last ran on), starting the search at `offset` so ranks pick different ones; at
  /// most once per 100 ms (never fighting the scheduler). Does nothing when no such CPU exists.
  void move_off(int here, const std::vector<int>& used, int offset);
  /// Whether move_off would act now (so a caller gathers `used` only then).
  bool due() const { return std::chrono::steady_clock::now() - last_ >= kInterval; }

 private:
  static constexpr std::chrono::milliseconds kInterval{100};
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace cohort::detail
