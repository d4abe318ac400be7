// Point-to-point messages through the control plane and c10d (Gloo, NCCL): isend/irecv where the
// shared-memory rings cannot carry them (ranks on several hosts, CUDA tensors, COHORT_SHM=0).
// Protocol: the n-th send from A to B on tag t pairs with B's n-th receive from A on tag t. The sender
// posts a notice (n, fingerprint hash, "dtype [shape]") on the control plane and its data on c10d at
// once, never waiting for the receiver. The receiver waits for the notice on a thread of its own, checks
// it and only then posts the receive, so a mismatch is named before any byte moves, and a receive
// never holds up the collectives queued behind it. Each message has its own c10d tag (channel and
// number mixed), so messages pair up whatever order the receives are posted in.
#pragma once

#include <memory>

namespace cohort::detail {

class CommImpl;
class PendingOp;

class PointToPoint {
 public:
  explicit PointToPoint(CommImpl& comm) : comm_(comm) {}

  /// Posts the notice and the data at once.
  std::shared_ptr<PendingOp> post_send(std::shared_ptr<PendingOp> op);
  /// Waits for the sender's notice on a thread of its own (the caller's for a CUDA tensor), checks it,
  /// then posts the receive.
  std::shared_ptr<PendingOp> post_recv(std::shared_ptr<PendingOp> op);

 private:
  /// Blocks in c10d's wait of `op` (on a waiter thread) and records its outcome.
  void wait_transport(PendingOp& op);

  CommImpl& comm_;
};

}  // namespace cohort::detail
