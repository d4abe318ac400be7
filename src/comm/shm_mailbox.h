// Point-to-point messages between ranks on one host, through the shared-memory segment's rings (one
// ring per ordered pair, comm/shm_ring.h). This is MPI's eager protocol: a message is an envelope
// (channel tag, number on the channel, fingerprint hash, the sender's dtype and shape) and then its
// bytes, written into the ring to the receiver.
//  - A send that fits the ring's free room, with no earlier send to that peer still in line, is written
//    whole on the caller's thread and is complete at once: the latency of two memcpys and a store.
//    Otherwise it takes a ticket (its place in line to that peer) and finish_send writes it in pieces
//    as the receiver frees room, on a thread of the caller's choosing. A send never waits for its
//    receive to be posted unless its message is larger than the ring's free room.
//  - A receive matches by (tag, number), so receives may be posted in any order: envelopes of other
//    messages met on the way are set aside with their bytes (MPI's unexpected-message queue), and a
//    posted receive gets its bytes streamed straight into its tensor. The envelope is checked before
//    any byte lands: a mismatch is reported with the sender's description, its bytes dropped.
// Every wait calls the caller's watch every few milliseconds (dead peer, abort, deadline).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/shm_transport.h"

namespace cohort::detail {

class ShmMailbox {
 public:
  explicit ShmMailbox(const ShmTransport& shm);
  ~ShmMailbox();

  /// What travels ahead of a message's bytes.
  struct Envelope {
    uint64_t tag = 0, seq = 0, hash = 0;
    // The sender's dtype (a c10::ScalarType) and shape, for the receiver's mismatch message: sent as
    // numbers and put into words only on a mismatch (formatting them cost a small message 0.4 us).
    int32_t dtype = 0;
    std::vector<int64_t> shape;
  };

  /// Writes the message now when it can (true: the send is complete); else gives it a `ticket` in the
  /// line to `peer` and returns false: finish_send must then write it.
  bool try_send(int peer, const Envelope& envelope, const void* bytes, size_t n, uint64_t& ticket);
  /// Writes a message that try_send put in line, once the messages ahead of it are written; blocks.
  void finish_send(int peer, uint64_t ticket, const Envelope& envelope, const void* bytes, size_t n,
                   const ShmWatch& watch);

  /// One receive: which message, where its bytes go, and how it went.
  struct Receive {
    uint64_t tag = 0, seq = 0, hash = 0;
    void* destination = nullptr;
    size_t n = 0;
    std::atomic<bool> envelope_seen{false};  // the sender's envelope arrived (timeout messages say so)
    bool done = false;
    std::optional<Envelope> mismatch;  // the sender's envelope, when its hash or size differs
  };
  /// Takes the message when it has fully arrived; true when `receive` is done (see its mismatch).
  bool try_receive(int peer, Receive& receive);
  /// Blocks until `receive` is done.
  void receive(int peer, Receive& receive, const ShmWatch& watch);

  /// Messages written whole and received whole here (tests check the path was taken).
  int64_t sent() const { return sent_; }
  int64_t received() const { return received_; }

 private:
  struct Outbox;
  struct Inbox;
  struct Incoming;
  /// Reads every complete envelope and every byte the ring from the inbox's peer holds.
  void progress(Inbox& inbox);
  /// Reads the envelope at the ring's head (whole there) and directs its bytes.
  void start_incoming(Inbox& inbox);
  /// A message set aside earlier, once complete, into `receive`; false when none (yet).
  bool take_set_aside(Inbox& inbox, Receive& receive);
  void write_envelope(Outbox& outbox, const Envelope& envelope, size_t n);

  std::vector<std::unique_ptr<Outbox>> outboxes_;  // by peer; none for this rank
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::atomic<int64_t> sent_{0}, received_{0};
};

}  // namespace cohort::detail
