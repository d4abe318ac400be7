// The control-plane socket mesh (see control_plane.h): set-up through the store, framed 32-byte
// messages, dissemination agreement, and failure detection by EOF and abort notices.
#include "comm/control_plane.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include "cohort/error.h"
#include "comm/control_handshake.h"
#include "core/socket.h"

namespace cohort::detail {
namespace {

constexpr uint32_t kAgree = 1, kAbort = 3, kBye = 4;
constexpr uint32_t kP2PNotice = 5;  // seq, a = hash, b = tag, text = description (receive_p2p only)
// How long receive_p2p holds the sockets before letting agree() on another thread have them.
constexpr int kP2PSliceMs = 2;
constexpr size_t kHeaderBytes = 32;

void put_u32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left < 0) return 0;
  return left > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max() : int(left);
}

std::string this_host() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

std::string job_label(const std::string& run_id) {
  return run_id.empty() ? "a job without a run id" : "job '" + run_id + "'";
}

ControlPlane::ControlPlane(c10d::Store& store, const ControlPlaneConfig& config)
    : rank_(config.rank), size_(config.size), peers_(config.size) {
  peers_[rank_].host = this_host();
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  // This rank's own address, as peers dial it: never every interface unless COHORT_STORE_BIND=any.
  listen_fd_ = listen_for_peers(config.local_address);
  const std::string endpoint = config.local_address + ":" + std::to_string(net::port_of(listen_fd_.get()));
  store.set(config.prefix + "/cp/" + std::to_string(rank_), std::vector<uint8_t>(endpoint.begin(), endpoint.end()));
  connect_mesh(store, config);
}

void ControlPlane::connect_mesh(c10d::Store& store, const ControlPlaneConfig& config) {
  const auto deadline = Clock::now() + config.timeout;
  const HandshakeConfig handshake{config.rank,   config.size,        config.run_id,
                                  config.secret, peers_[rank_].host, config.timeout};
  // Lower ranks are dialled, higher ranks dial us: each pair has exactly one connection, and the
  // listen backlog lets a dial complete before the accept. A dialler waits for the answer to its
  // handshake; rank r answers once its own dials (to ranks below r) are done, so rank 0 answers at
  // once and, by induction, every rank does: the order cannot deadlock.
  for (int peer = 0; peer < rank_; ++peer) {
    auto raw = store.get(config.prefix + "/cp/" + std::to_string(peer));
    PeerLink link = dial_peer(peer, std::string(raw.begin(), raw.end()), handshake, deadline);
    net::set_nodelay(link.fd.get());
    peers_[peer].fd = std::move(link.fd);
    peers_[peer].host = link.host;
  }
  for (PeerLink& link : accept_peers(listen_fd_.get(), handshake, deadline)) {
    net::set_nodelay(link.fd.get());
    peers_[link.rank].fd = std::move(link.fd);
    peers_[link.rank].host = link.host;
  }
  listen_fd_.reset();
}

ControlPlane::~ControlPlane() {
  Message bye;
  bye.type = kBye;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) send_message(p, bye, true);
}  // the sockets and the eventfd close with their Fds

void ControlPlane::interrupt() {
  uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void ControlPlane::send_message(int peer, const Message& message, bool best_effort) {
  std::string frame(kHeaderBytes + message.text.size(), '\0');
  put_u32(&frame[0], message.type);
  put_u32(&frame[4], uint32_t(message.text.size()));
  put_u64(&frame[8], message.seq);
  put_u64(&frame[16], message.a);
  put_u64(&frame[24], message.b);
  std::memcpy(&frame[kHeaderBytes], message.text.data(), message.text.size());
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  if (!peers_[peer].fd || peers_[peer].closed) return;
  // Best effort sends what fits now. A failure is a peer that is gone: receive() reports it when we
  // next wait on it.
  net::write_all(peers_[peer].fd.get(), frame, best_effort ? Clock::now() : Clock::time_point::max());
}

std::optional<PeerFailure> ControlPlane::drain(int p) {
  Peer& peer = peers_[p];
  char chunk[4096];
  for (;;) {
    ssize_t n = ::recv(peer.fd.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      peer.buffer.append(chunk, size_t(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    peer.closed = true;  // EOF or reset: the process is gone
    break;
  }
  while (peer.buffer.size() >= kHeaderBytes) {
    const uint32_t text_len = get_u32(&peer.buffer[4]);
    if (peer.buffer.size() < kHeaderBytes + text_len) break;
    Message m;
    m.type = get_u32(&peer.buffer[0]);
    m.seq = get_u64(&peer.buffer[8]);
    m.a = get_u64(&peer.buffer[16]);
    m.b = get_u64(&peer.buffer[24]);
    m.text = peer.buffer.substr(kHeaderBytes, text_len);
    peer.buffer.erase(0, kHeaderBytes + text_len);
    if (m.type == kAbort) return PeerFailure{PeerFailure::kAborted, p, m.text};
    if (m.type == kBye) {
      peer.said_bye = true;
      continue;
    }
    peer.inbox.push_back(std::move(m));
  }
  // A clean exit says goodbye first; a socket closed without it means the process died.
  if (peer.closed && !peer.said_bye) return PeerFailure{PeerFailure::kDied, p, ""};
  return std::nullopt;
}

std::optional<PeerFailure> ControlPlane::receive(int from, Clock::time_point deadline, Message& out) {
  std::vector<pollfd> fds;
  std::vector<int> owners;
  for (;;) {
    // Point-to-point notices wait in the inbox for receive_p2p; agreement takes the next other message.
    auto& inbox = peers_[from].inbox;
    auto next = std::find_if(inbox.begin(), inbox.end(), [](const Message& m) { return m.type != kP2PNotice; });
    if (next != inbox.end()) {
      out = std::move(*next);
      inbox.erase(next);
      return std::nullopt;
    }
    if (peers_[from].closed)
      return PeerFailure{PeerFailure::kDied, from, "it shut down its Comm while this rank still waits for it"};
    fds.clear();
    owners.clear();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || !peers_[p].fd || peers_[p].closed) continue;
      fds.push_back(pollfd{peers_[p].fd.get(), POLLIN, 0});
      owners.push_back(p);
    }
    fds.push_back(pollfd{wake_fd_.get(), POLLIN, 0});
    const int ready = net::poll_fds(fds, remaining_ms(deadline));
    if (ready <= 0) return PeerFailure{PeerFailure::kTimedOut, from, ""};
    if (fds.back().revents != 0) return PeerFailure{PeerFailure::kAborted, rank_, "interrupted"};
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      // Any peer's death or abort is fatal: every collective needs every rank.
      if (auto failure = drain(owners[i])) return failure;
    }
  }
}

std::optional<PeerFailure> ControlPlane::agree(uint64_t seq, uint64_t hash, Clock::time_point deadline,
                                               AgreeResult& result) {
  std::lock_guard<std::mutex> lock(mutex_);
  result.min_hash = result.max_hash = hash;
  // Dissemination: in round k send to rank+2^k, receive from rank-2^k; after ceil(log2 n) rounds each
  // rank has combined every rank's value. Min and max are idempotent, so overlaps do no harm.
  for (int distance = 1; distance < size_; distance *= 2) {
    const int to = (rank_ + distance) % size_;
    const int from = (rank_ - distance % size_ + size_) % size_;
    Message m;
    m.type = kAgree;
    m.seq = seq;
    m.a = result.min_hash;
    m.b = result.max_hash;
    send_message(to, m, false);
    Message in;
    if (auto failure = receive(from, deadline, in)) return failure;
    if (in.type != kAgree || in.seq != seq) {
      // The peer is at another collective (a different count of calls): force disagreement.
      result.min_hash = 0;
      result.max_hash = std::numeric_limits<uint64_t>::max();
      continue;
    }
    result.min_hash = std::min(result.min_hash, in.a);
    result.max_hash = std::max(result.max_hash, in.b);
  }
  return std::nullopt;
}

void ControlPlane::send_p2p(int peer, uint64_t tag, const P2PNotice& notice) {
  Message m;
  m.type = kP2PNotice;
  m.seq = notice.seq;
  m.a = notice.hash;
  m.b = tag;
  m.text = notice.described;
  send_message(peer, m, false);
}

std::optional<PeerFailure> ControlPlane::receive_p2p(const P2PKey& key, Clock::time_point deadline, P2PNotice& out) {
  const int from = key.peer;
  for (;;) {
    pollfd wake{wake_fd_.get(), POLLIN, 0};
    if (net::poll_fds(&wake, 1, 0) > 0) return PeerFailure{PeerFailure::kAborted, rank_, "interrupted"};
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      // agree() holds the sockets and drains every peer meanwhile: look again in a moment.
      if (Clock::now() > deadline) return PeerFailure{PeerFailure::kTimedOut, from, ""};
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    auto& inbox = peers_[from].inbox;
    auto notice = std::find_if(inbox.begin(), inbox.end(), [&](const Message& m) {
      return m.type == kP2PNotice && m.b == key.tag && m.seq == key.seq;
    });
    if (notice != inbox.end()) {
      out = P2PNotice{notice->seq, notice->a, notice->text};
      inbox.erase(notice);
      return std::nullopt;
    }
    if (peers_[from].closed)
      return PeerFailure{PeerFailure::kDied, from, "it shut down its Comm while this rank still waits for it"};
    if (Clock::now() > deadline) return PeerFailure{PeerFailure::kTimedOut, from, ""};
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || !peers_[p].fd || peers_[p].closed) continue;
      fds.push_back(pollfd{peers_[p].fd.get(), POLLIN, 0});
      owners.push_back(p);
    }
    const int ready = net::poll_fds(fds, std::min(kP2PSliceMs, remaining_ms(deadline)));
    for (size_t i = 0; ready > 0 && i < fds.size(); ++i)
      if (fds[i].revents != 0)
        if (auto failure = drain(owners[i])) return failure;
    if (ready == 0) {
      lock.unlock();  // a quiet slice: give agree() and other receivers a turn at the sockets
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

void ControlPlane::broadcast_abort(const std::string& reason) {
  Message m;
  m.type = kAbort;
  m.text = reason;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) send_message(p, m, true);
}

std::optional<PeerFailure> ControlPlane::check_peers() {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;  // the launcher is in an agreement and will see it
  std::vector<pollfd> fds;
  std::vector<int> owners;
  for (int p = 0; p < size_; ++p) {
    // A death another thread saw first stays a death: every watcher must learn of it, not only the first.
    if (p != rank_ && peers_[p].closed && !peers_[p].said_bye) return PeerFailure{PeerFailure::kDied, p, ""};
    if (p == rank_ || !peers_[p].fd || peers_[p].closed) continue;
    fds.push_back(pollfd{peers_[p].fd.get(), POLLIN, 0});
    owners.push_back(p);
  }
  if (net::poll_fds(fds, 0) <= 0) return std::nullopt;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents != 0)
      if (auto failure = drain(owners[i])) return failure;
  return std::nullopt;
}

std::vector<int> ControlPlane::dead_peers() {
  std::vector<int> dead;
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return dead;  // another thread reads the sockets: ask again in a moment
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !peers_[p].fd) continue;
    while (!peers_[p].closed && drain(p)) {
    }
    if (peers_[p].closed && !peers_[p].said_bye) dead.push_back(p);
  }
  return dead;
}

}  // namespace cohort::detail
