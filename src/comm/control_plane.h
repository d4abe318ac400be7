// A full mesh of TCP sockets between ranks for tiny control messages, separate from the data path:
//  - agreement on each collective's fingerprint before any data moves (dissemination: ceil(log2 n)
//    rounds, each rank sends 32 bytes per round; min and max of the hashes are equal iff all agree),
//  - abort notices, so one rank's failure reaches every rank at once,
//  - dead-rank detection: a process that exits or is killed closes its sockets, which every peer sees.
// Each connection opens with a handshake of both ends' rank and run id (the job, world/job_identity.h)
// and a proof of the job's secret (control_handshake.h), so a rank of another job that reached this
// mesh is refused, naming both jobs, and a stranger is dropped, before any collective.
// See docs/design/collective-safety.md for why this is not done with Gloo collectives (cost).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/socket.h"

namespace c10d {
class Store;
}

namespace cohort::detail {

using Clock = std::chrono::steady_clock;

/// Why the control plane could not complete: a peer died, a peer aborted, or the deadline passed.
struct PeerFailure {
  enum Kind { kDied, kAborted, kTimedOut } kind;
  int peer = -1;       // the rank that died / aborted / we were waiting for
  std::string reason;  // abort reason sent by the peer
};

struct AgreeResult {
  uint64_t min_hash = 0;
  uint64_t max_hash = 0;
  bool agreed() const { return min_hash == max_hash; }
};

/// "job 'ID'", or "a job without a run id" when no launcher named it: how messages name a job.
std::string job_label(const std::string& run_id);

struct ControlPlaneConfig {
  std::string prefix;  // store keys of this mesh: PREFIX/cp/<rank>
  int rank = 0;
  int size = 1;
  std::string local_address;  // what peers dial
  std::chrono::milliseconds timeout{300000};
  std::string run_id;  // this rank's job; every peer must show the same
  std::string secret;  // the job's (core/job_secret.h): every peer proves it (control_handshake.h)
};

class ControlPlane {
 public:
  /// Connects to every other rank; addresses are exchanged through `store` under `config.prefix`.
  ControlPlane(c10d::Store& store, const ControlPlaneConfig& config);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  /// Global min/max of every rank's `hash` for collective `seq`, or the failure that stopped it.
  std::optional<PeerFailure> agree(uint64_t seq, uint64_t hash, Clock::time_point deadline, AgreeResult& result);

  /// A sender's notice of point-to-point message `seq` on channel `tag`: its fingerprint hash and a
  /// description, so the receiver can check (and explain) before any data moves. Never waits for the peer.
  struct P2PNotice {
    uint64_t seq = 0, hash = 0;
    std::string described;
  };
  void send_p2p(int peer, uint64_t tag, const P2PNotice& notice);
  /// Which notice a receive waits for: message `seq` from `peer` on channel `tag`.
  struct P2PKey {
    int peer = -1;
    uint64_t tag = 0, seq = 0;
  };
  /// Waits for that notice (receives of one channel may wait from several threads at once), watching
  /// every peer for failures. Shares the sockets with agree(): it holds them only in short slices, so
  /// a collective on another thread of this Comm is never held up for long.
  std::optional<PeerFailure> receive_p2p(const P2PKey& key, Clock::time_point deadline, P2PNotice& out);

  /// Best effort, never blocks: tells every peer we are failing and why.
  void broadcast_abort(const std::string& reason);

  /// Makes every current and later wait return at once (kAborted, peer = own rank): used on shutdown
  /// and when this rank fails, so no thread stays blocked in the control plane.
  void interrupt();

  /// Non-blocking look at every socket for a dead or aborting peer (called while a collective runs).
  std::optional<PeerFailure> check_peers();

  /// Non-blocking: the ranks whose connection closed without a goodbye (they died), after reading what
  /// every socket holds. For shutdown paths (the timeline's gather): abort notices read here are dropped.
  std::vector<int> dead_peers();

  /// The host name rank `r` runs on, as it told in the handshake (this rank's own for r == rank).
  const std::string& host_of(int r) const { return peers_.at(r).host; }

 private:
  struct Message {
    uint32_t type = 0;
    uint64_t seq = 0, a = 0, b = 0;
    std::string text;
  };
  struct Peer {
    net::Fd fd;
    bool closed = false;
    bool said_bye = false;      // the peer shut down cleanly (its EOF is not a death)
    std::string buffer;         // bytes read but not yet parsed
    std::deque<Message> inbox;  // parsed messages, in arrival order
    std::string host;           // its host name (control_handshake.h), for messages
  };

  /// Dials every lower rank and accepts every higher one (control_handshake.h), by config.timeout.
  void connect_mesh(c10d::Store& store, const ControlPlaneConfig& config);
  void send_message(int peer, const Message& message, bool best_effort);
  /// Reads what is available from peer `p` into its inbox; returns a failure on EOF or abort.
  std::optional<PeerFailure> drain(int p);
  /// Waits for the next message from `from`, watching every other peer for failures.
  std::optional<PeerFailure> receive(int from, Clock::time_point deadline, Message& out);

  int rank_;
  int size_;
  net::Fd listen_fd_;
  net::Fd wake_fd_;  // eventfd written by interrupt()
  std::vector<Peer> peers_;
  std::mutex mutex_;        // one reader at a time: the launcher thread or a waiting thread
  std::mutex write_mutex_;  // whole frames: notices and aborts are sent from other threads than agree()
};

}  // namespace cohort::detail
