// The leaders' link between hosts (see cross_host_link.h).
#include "comm/cross_host_link.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "cohort/error.h"
#include "comm/control_handshake.h"
#include "core/check.h"
#include "core/log.h"

namespace cohort::detail {
namespace {

constexpr const char* kLink = "hierarchy's cross-host link";
// Passes over the sockets without waiting before poll(2) sleeps: each costs a few microseconds, and a
// small message from another host usually lands within them.
constexpr int kBusyPasses = 16;
constexpr auto kWatchEvery = std::chrono::milliseconds(5);
// Most bytes one sendmsg(2) or recvmsg(2) asks for: every peer's transfer advances in turn.
constexpr size_t kSlice = size_t(1) << 20;
constexpr size_t kMaxIov = 8;

// A peer's pieces of one transfer, in order, and how far the first has gone.
struct Queue {
  std::vector<LinkPiece> pieces;
  size_t next = 0, done = 0;
  bool empty() const { return next == pieces.size(); }
  void advance(size_t n) {
    while (next < pieces.size() && done + n >= pieces[next].bytes) {
      n -= pieces[next].bytes - done;
      ++next;
      done = 0;
    }
    done += n;
  }
  // The queue's next pieces as one vector for sendmsg/recvmsg: a header and its data leave in one
  // segment (two sends cost two trips through the kernel's network path, the receiver's included).
  size_t gather(iovec* iov, size_t max_iov) const {
    size_t count = 0, total = 0;
    for (size_t i = next; i < pieces.size() && count < max_iov && total < kSlice; ++i, ++count) {
      const size_t skip = i == next ? done : 0;
      const size_t len = std::min(pieces[i].bytes - skip, kSlice - total);
      iov[count] = {static_cast<char*>(pieces[i].data) + skip, len};
      total += len;
    }
    return count;
  }
};

void append(Queue& q, const LinkPiece& piece) {
  if (piece.bytes == 0) return;
  q.pieces.push_back(piece);
  q.advance(0);
}

std::vector<Queue> by_host(const std::vector<LinkPiece>& pieces, int hosts) {
  std::vector<Queue> queues(hosts);
  for (const LinkPiece& piece : pieces)
    if (piece.bytes > 0) queues.at(piece.host).pieces.push_back(piece);
  for (Queue& q : queues) q.advance(0);
  return queues;
}

}  // namespace

CrossHostLink::CrossHostLink(c10d::Store& store, const CrossHostLinkConfig& config)
    : config_(config), links_(config.hosts) {
  net::Fd listener = listen_for_peers(config.local_address, kLink);
  const std::string endpoint = config.local_address + ":" + std::to_string(net::port_of(listener.get()));
  store.set(config.prefix + "/" + std::to_string(config.host), std::vector<uint8_t>(endpoint.begin(), endpoint.end()));
  HandshakeConfig handshake{config.host, config.hosts, config.run_id, config.secret, config.host_name, config.timeout};
  handshake.link = kLink;
  handshake.proof_tag = "hier";
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  // As the control plane: dial the lower hosts, accept the higher ones (no deadlock).
  for (int h = 0; h < config.host; ++h) {
    const auto raw = store.get(config.prefix + "/" + std::to_string(h));
    links_[h] = dial_peer(h, std::string(raw.begin(), raw.end()), handshake, deadline).fd;
  }
  for (PeerLink& link : accept_peers(listener.get(), handshake, deadline)) links_[link.rank] = std::move(link.fd);
  for (net::Fd& fd : links_) {
    if (!fd) continue;
    net::set_nodelay(fd.get());
    // init tried the name already: a refusal here is this socket's alone.
    if (!config.congestion.empty()) {
      const std::string why = net::set_congestion_control(fd.get(), config.congestion);
      if (!why.empty())
        throw Error(str(kLink, ": rank ", config.rank_of_host.at(config.host),
                        ", COHORT_TCP_CONGESTION=", config.congestion, ": ", why),
                    ErrorKind::kInvalidArgument);
    }
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
  }
}

void CrossHostLink::transfer(const std::vector<LinkPiece>& sends, const std::vector<LinkPiece>& recvs,
                             const ShmWatch& watch, const NextPiece& next) {
  std::vector<Queue> out = by_host(sends, config_.hosts), in = by_host(recvs, config_.hosts);
  std::vector<pollfd> waiting;
  int idle = 0;
  auto next_watch = std::chrono::steady_clock::now() + kWatchEvery;
  for (;;) {
    bool moved = false, pending = false;
    waiting.clear();
    for (int h = 0; h < config_.hosts; ++h) {
      short events = 0;
      for (const bool sending : {true, false}) {
        Queue& q = sending ? out[h] : in[h];
        if (q.empty()) continue;
        const int fd = links_[h].get();
        iovec iov[kMaxIov];
        msghdr message{};
        message.msg_iov = iov;
        message.msg_iovlen = q.gather(iov, kMaxIov);
        const ssize_t n = sending ? ::sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL)
                                  : ::recvmsg(fd, &message, MSG_DONTWAIT);
        if (n > 0) {
          q.advance(size_t(n));
          moved = true;
          if (!sending && q.empty() && next) {
            // Queues of hosts already passed in this pass move in the next: `moved` keeps poll away.
            const LinkFollowUp follow_up = next(h);
            for (const LinkPiece& piece : follow_up.receives) append(in.at(piece.host), piece);
            for (const LinkPiece& piece : follow_up.sends) append(out.at(piece.host), piece);
          }
        } else if (n == 0 && !sending) {
          lost(h, "the connection closed mid-transfer", watch);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          lost(h, std::string("the connection failed mid-transfer: ") + std::strerror(errno), watch);
        }
        if (!q.empty()) events |= sending ? POLLOUT : POLLIN;
      }
      if (events != 0) {
        pending = true;
        waiting.push_back({links_[h].get(), events, 0});
      }
    }
    if (!pending) return;
    if (std::chrono::steady_clock::now() >= next_watch) {
      watch();
      next_watch = std::chrono::steady_clock::now() + kWatchEvery;
    }
    idle = moved ? 0 : idle + 1;
    if (idle < kBusyPasses) continue;
    net::poll_fds(waiting, int(kWatchEvery.count()));  // wakes when a peer's bytes or buffer space arrive
  }
}

at::Tensor CrossHostLink::scratch(int64_t rows, int64_t numel, const at::TensorOptions& options) {
  return scratch_.get(rows * numel, options).view({rows, numel});
}

void CrossHostLink::lost(int host, const std::string& why, const ShmWatch& watch) {
  // Usually the peer's process died: the control plane names the rank (the watch throws) once it
  // sees the closed socket too.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until) {
    watch();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int rank = config_.rank_of_host.at(host);
  throw Error(
      str(kLink, ": rank ", config_.rank_of_host.at(config_.host), " lost rank ", rank, " (on host ", host, "): ", why),
      ErrorKind::kPeerDied, {rank});
}

}  // namespace cohort::detail
