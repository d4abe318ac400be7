// Point to point between ranks on one host, through the shared-memory segment's rings (ShmMailbox)
// instead of a control-plane notice plus Gloo: the envelope carries what the notice did (number on the
// channel, fingerprint hash, the sender's dtype and shape), so a mismatch is still named before any byte
// lands, and a small message costs two memcpys instead of two socket round trips and a thread.
#pragma once

#include <memory>

#include "comm/shm_wait.h"

namespace cohort::detail {

class CommImpl;
class PendingOp;

class ShmPointToPoint {
 public:
  explicit ShmPointToPoint(CommImpl& comm) : comm_(comm) {}

  /// Written at once when it fits in the ring; otherwise a waiter (or the caller, for a blocking
  /// call) finishes it.
  std::shared_ptr<PendingOp> post_send(std::shared_ptr<PendingOp> op);
  /// Taken at once when its message is there; otherwise a waiter (or the caller) finishes it.
  std::shared_ptr<PendingOp> post_recv(std::shared_ptr<PendingOp> op);

 private:
  /// What a wait in the segment watches: a dead or aborting peer, the Comm poisoned or closing, the
  /// op's deadline; throws TransportStopped naming it.
  ShmWatch watch(const std::shared_ptr<PendingOp>& op);

  CommImpl& comm_;
};

}  // namespace cohort::detail
