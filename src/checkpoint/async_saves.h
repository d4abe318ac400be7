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

class Group;

class AsyncSaves {
 public:
  static AsyncSaves& instance();

  /// Waits for the save in flight (a line in the log names it and how long `waiter` waited), then
  /// raises its error, once (this process's: see settle()).
  void wait(const std::string& waiter);
  /// wait() on every rank of `group` together: when any rank holds an error of the save before, every
  /// rank raises it ("<waiter> was not done: async save_checkpoint(...) failed: ..."), so no rank is
  /// left in the next collective while another throws.
  void settle(Group& group, const std::string& waiter);
  /// Whether start() on `comm` needs a writer's Comm split from it: every rank says, and all split
  /// when any does (the split is a collective; the ranks' histories may differ).
  bool needs_writer_comm(const std::shared_ptr<Comm>& comm) const;
  /// Runs `job` (its tensors snapshotted into snapshot()) on the background writer, over a Comm split
  /// from `comm` (the savers') when `split`, else the one split before.
  void start(const std::shared_ptr<Comm>& comm, SaveJob job, bool split);
  bool in_flight();
  /// The buffer of the snapshots; the caller waits before it copies into it.
  SnapshotBuffer& snapshot() { return snapshot_; }
  /// At exit or by finish_checkpoint_saves(): waits, then frees the buffer and the writer's Comm.
  void finish();

 private:
  AsyncSaves() = default;
  std::shared_ptr<Comm> writer_comm(const std::shared_ptr<Comm>& comm, bool split);
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
