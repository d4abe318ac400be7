// The background writer of async saves (SaveOptions::async): one save in flight per process, run on a
// thread of its own over a Comm of its own (split once from the savers' Comm, as DCP's async_save wants
// a process group of its own), so its collectives never interleave with training's. A save waits for
// the one before it; that one's error is raised then, or by finish_checkpoint_saves().
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "checkpoint/save_job.h"
#include "checkpoint/snapshot_buffer.h"
#include "cohort/comm.h"

namespace cohort::detail::ckpt {

class AsyncSaves {
 public:
  static AsyncSaves& instance();

  /// Waits for the save in flight (a line in the log names it and how long `waiter` waited), then
  /// raises its error once, on every rank that ran it (its last phase agrees on the outcome).
  void wait(const std::string& waiter);
  /// Runs `job` (its tensors snapshotted into snapshot()) on the background writer. `comm`: the savers'
  /// (a collective the first time each Comm is seen: the writer's Comm is split from it).
  void start(const std::shared_ptr<Comm>& comm, SaveJob job);
  bool in_flight();
  /// The buffer of the snapshots; the caller waits before it copies into it.
  SnapshotBuffer& snapshot() { return snapshot_; }
  /// At exit or by finish_checkpoint_saves(): waits, then frees the buffer and the writer's Comm.
  void finish();

 private:
  AsyncSaves() = default;
  std::shared_ptr<Comm> writer_comm(const std::shared_ptr<Comm>& comm);
  void run(std::shared_ptr<Comm> comm, SaveJob job);
  void finish_at_exit();  // finish(), its error in the log: nothing may throw at exit

  std::mutex mutex_;  // guards error_ and done_ against the writer thread
  std::thread thread_;
  std::exception_ptr error_;
  bool done_ = true;
  std::string running_;  // the save in flight, for the waiting line
  std::chrono::steady_clock::time_point started_;
  std::weak_ptr<Comm> source_;  // the savers' Comm the writer's was split from
  std::shared_ptr<Comm> writer_;
  SnapshotBuffer snapshot_;
};

}  // namespace cohort::detail::ckpt
