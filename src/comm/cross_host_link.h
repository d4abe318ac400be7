// The hierarchy's link between hosts (docs/design/transports.md): one TCP connection between each pair
// of the hosts' leaders (each host's first rank), opened with the control plane's handshake (the job's
// secret, its own proof tag) and used for nothing but collective data, so a transfer never waits
// behind a control message. A transfer moves every piece to and from every host at once on non-
// blocking sockets: a few passes without waiting (a small message between hosts arrives within tens of
// microseconds), then poll(2), which wakes when bytes arrive; the Comm's watch runs every 5 ms, so a
// dead rank or the deadline ends the wait. Replaces the leaders' Gloo group, whose small allreduce
// took milliseconds here.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "comm/grown_buffer.h"
#include "comm/shm_wait.h"
#include "core/socket.h"

namespace cohort::detail {

struct CrossHostLinkConfig {
  std::string prefix;  // store keys: PREFIX/<host>
  int host = 0;        // this rank's host index
  int hosts = 2;
  std::vector<int> rank_of_host;  // the Comm rank of each host's member of the link, for messages
  std::string local_address;      // what the other members dial
  std::string run_id, secret, host_name;
  std::chrono::milliseconds timeout{300000};
  std::string congestion;  // TCP congestion control of the links ("": the system's; COHORT_TCP_CONGESTION)
};

/// One piece of a transfer: `bytes` bytes to or from host `host`'s member of the link.
struct LinkPiece {
  int host = -1;
  void* data = nullptr;
  size_t bytes = 0;
};

/// What a transfer moves next once every receive piece given for one host has arrived: pieces to
/// receive (their sizes read from what arrived) and pieces to send (data made from it), each queued
/// behind its host's earlier ones.
struct LinkFollowUp {
  std::vector<LinkPiece> receives, sends;
};
/// Called with that host; a follow-up with no receive for it ends its receives (unless another's adds one).
using NextPiece = std::function<LinkFollowUp(int host)>;

class CrossHostLink {
 public:
  /// Every member of the link calls this: connects to every other (addresses through `store`).
  CrossHostLink(c10d::Store& store, const CrossHostLinkConfig& config);

  /// Sends `sends` and receives `recvs`, all at once; pieces of one peer go in the order given. Calls
  /// `watch` every 5 ms while waiting (it throws to stop). A peer whose connection closes or
  /// fails: the watch gets 2 s to name why (its rank died), else cohort::Error (kPeerDied) naming it.
  /// `next` (optional) appends what the pieces that arrived call for (a header's size, a combined block).
  void transfer(const std::vector<LinkPiece>& sends, const std::vector<LinkPiece>& recvs, const ShmWatch& watch,
                const NextPiece& next = nullptr);

  int host() const { return config_.host; }
  int hosts() const { return config_.hosts; }
  /// `rows` x `numel` elements of `options`' dtype for what arrives: one block kept and grown, so a
  /// collective allocates nothing once the largest size was seen (valid until the next call).
  at::Tensor scratch(int64_t rows, int64_t numel, const at::TensorOptions& options);

 private:
  [[noreturn]] void lost(int host, const std::string& why, const ShmWatch& watch);

  CrossHostLinkConfig config_;
  std::vector<net::Fd> links_;  // by host; empty at this rank's own host
  GrownBuffer scratch_;
};

}  // namespace cohort::detail
