// The ranks that save or load a checkpoint together, with the two collectives the protocol needs:
// every rank's string to every rank (status and shard records) and a barrier. Built on Comm, so a
// rank that dies or never arrives makes the others fail with its name instead of hanging; in a
// world of one (or before init()) both are local.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"

namespace cohort::detail::ckpt {

class Group {
 public:
  /// `comm`, else the world's when init() ran, else a world of one.
  explicit Group(std::shared_ptr<Comm> comm);
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The Comm the group runs on (resolved: never null).
  const std::shared_ptr<Comm>& comm() const { return comm_; }
  /// Every rank's `text`, in rank order.
  std::vector<std::string> allgather(const std::string& text);
  /// Every rank's list, in rank order; the items are any bytes (a path may hold a newline: hostile
  /// pass 19 S-1 cut one in two when lists went as lines).
  std::vector<std::vector<std::string>> allgather_lists(const std::vector<std::string>& items);

 private:
  std::shared_ptr<Comm> comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace cohort::detail::ckpt
