// The threads of strategy "dp": one per replica, started once with the strategy and kept for its life
// (nn.DataParallel and LibTorch's data_parallel start threads and copy the module on every call).
// run() hands every worker the same task with its replica index and returns when all are done, so the
// caller sees one synchronous step; a failure on a worker comes back to the caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cohort::detail {

class ReplicaWorkers {
 public:
  /// Starts `count` threads, each computing with `intra_op_threads` OpenMP threads of its own (0: the
  /// caller's count, taken as LibTorch's autograd threads take it). N replicas on the CPU share the
  /// cores: N x the caller's threads would oversubscribe them, as N processes with the default would.
  ReplicaWorkers(int count, int intra_op_threads);
  ~ReplicaWorkers();
  ReplicaWorkers(const ReplicaWorkers&) = delete;
  ReplicaWorkers& operator=(const ReplicaWorkers&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  /// Runs task(k) on worker k for every k < used and waits for all of them; rethrows the failure of
  /// the lowest-numbered worker that failed (the others still finish first).
  void run(int used, const std::function<void(int)>& task);

 private:
  void loop(int index);

  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int64_t generation_ = 0;  // one per run(): a worker runs each generation at most once
  int used_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace cohort::detail
