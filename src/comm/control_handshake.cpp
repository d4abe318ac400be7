// The control plane's connection handshake (see control_handshake.h). Wire, each number a u32:
//   acceptor -> dialler: kChallenge, nonce_a (32 bytes)
//   dialler -> acceptor: kHello, rank, run id size, host size, run id, host, nonce_d (32),
//                        HMAC("cp-dial", nonce_a, ...)
//   acceptor -> dialler: kHello, rank, run id size, host size, run id, host, HMAC("cp-accept", nonce_d, ...)
#include "comm/control_handshake.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "cohort/error.h"
#include "comm/control_plane.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/log.h"

namespace cohort::detail {
namespace {

constexpr uint32_t kChallenge = 0x43504332;  // "CPC2"
constexpr uint32_t kHello = 0x43504833;      // "CPH3": with the host name
constexpr uint32_t kMaxRunIdBytes = 4096;
constexpr uint32_t kMaxHostBytes = 255;
constexpr size_t kHelloHeader = 16;  // kHello, rank, run id size, host size
constexpr size_t kNonce = 32, kProof = 32;
// How long a connection may take to prove itself once accepted: a rank answers at once.
constexpr std::chrono::milliseconds kProofDeadline{5000};
constexpr const char* kTwoJobsHint =
    ": two jobs share one rendezvous (MASTER_ADDR:MASTER_PORT); give each job its own port";

uint32_t hs_get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void hs_put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

int hs_remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, std::numeric_limits<int>::max()));
}

bool hs_read_exact(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, hs_remaining_ms(deadline)) <= 0) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}

bool hs_send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

int hs_connect_until(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return -1;
  int fd = -1;
  while (Clock::now() < deadline) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
    ::close(fd);
    fd = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::freeaddrinfo(res);
  return fd;
}

// What the proof covers besides the nonces: who says it.
std::string hs_identity(int rank, const std::string& run_id, const std::string& host) {
  return std::to_string(rank) + "/" + run_id + "/" + host;
}

std::string hs_hello(const HandshakeConfig& config, const std::string& tail) {
  std::string bytes;
  hs_put_u32(bytes, kHello);
  hs_put_u32(bytes, uint32_t(config.rank));
  hs_put_u32(bytes, uint32_t(config.run_id.size()));
  hs_put_u32(bytes, uint32_t(config.host.size()));
  return bytes + config.run_id + config.host + tail;
}

// Whether a hello's header (kHelloHeader bytes) is one, with sizes in bounds.
bool hs_is_hello(const char* header) {
  return hs_get_u32(header) == kHello && hs_get_u32(header + 8) <= kMaxRunIdBytes &&
         hs_get_u32(header + 12) <= kMaxHostBytes;
}

std::string hs_peer_of(int fd) {
  sockaddr_in peer{};
  socklen_t size = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &size) != 0) return "an unknown peer";
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(peer.sin_port));
}

// One accepted connection on its way to proving itself.
struct hs_Pending {
  int fd = -1;
  std::string peer, nonce, buffer;
  Clock::time_point deadline;
};

void hs_drop(hs_Pending& p, int rank, const std::string& why) {
  COHORT_WARN("control plane: rank ", rank, " refused ", p.peer, ": ", why);
  ::close(p.fd);
  p.fd = -1;
}

// Once `p` holds a whole hello: its rank when it proves itself (the answer sent, `host` set), -1 when
// dropped. Throws when a rank that knows the secret belongs to another job.
int hs_settle(hs_Pending& p, const HandshakeConfig& config, const std::vector<bool>& connected, std::string& host) {
  const uint32_t length = hs_get_u32(&p.buffer[8]), host_length = hs_get_u32(&p.buffer[12]);
  const int rank = int(hs_get_u32(&p.buffer[4]));
  const std::string run_id = p.buffer.substr(kHelloHeader, length);
  host = p.buffer.substr(kHelloHeader + length, host_length);
  const std::string nonce = p.buffer.substr(kHelloHeader + length + host_length, kNonce);
  const std::string proof = p.buffer.substr(kHelloHeader + length + host_length + kNonce, kProof);
  if (!same_bytes(proof, hmac_proof(config.secret, "cp-dial", p.nonce, nonce + hs_identity(rank, run_id, host)))) {
    hs_drop(p, config.rank, "it does not know the job's secret (claimed rank " + std::to_string(rank) + " of " +
                             job_label(run_id) + ")");
    return -1;
  }
  const std::string mine = hs_identity(config.rank, config.run_id, config.host);
  const std::string answer = hs_hello(config, hmac_proof(config.secret, "cp-accept", nonce, p.nonce + mine));
  const bool answered = hs_send_all(p.fd, answer);  // first, so the dialler can name both jobs too
  if (run_id != config.run_id) {
    ::close(p.fd);
    throw Error("control plane: rank " + std::to_string(config.rank) + " of " + job_label(config.run_id) +
                " was dialled by rank " + std::to_string(rank) + " of " + job_label(run_id) + kTwoJobsHint);
  }
  if (rank <= config.rank || rank >= config.size || connected[rank] || !answered) {
    hs_drop(p, config.rank, "it claims rank " + std::to_string(rank) + ", which is not a rank still to connect");
    return -1;
  }
  return rank;
}

// Reads what `p` sent; its rank once it proved itself (`host` set), -1 while incomplete or when dropped
// (fd < 0).
int hs_progress(hs_Pending& p, const HandshakeConfig& config, const std::vector<bool>& connected, std::string& host) {
  char chunk[1024];
  const ssize_t n = ::recv(p.fd, chunk, sizeof chunk, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    hs_drop(p, config.rank, "it closed the connection before proving the job's secret");
    return -1;
  }
  if (n > 0) p.buffer.append(chunk, size_t(n));
  if (p.buffer.size() >= kHelloHeader && !hs_is_hello(p.buffer.data())) {
    hs_drop(p, config.rank, "its first message is not a control-plane handshake");
    return -1;
  }
  if (p.buffer.size() < kHelloHeader ||
      p.buffer.size() < kHelloHeader + hs_get_u32(&p.buffer[8]) + hs_get_u32(&p.buffer[12]) + kNonce + kProof)
    return -1;
  return hs_settle(p, config, connected, host);
}

}  // namespace

int listen_for_peers(const std::string& address) {
  const char* bind = std::getenv("COHORT_STORE_BIND");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (bind != nullptr && std::string(bind) == "any") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else {
    COHORT_CHECK(::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) == 1, "control plane: this rank's address ",
                 address, " is not a numeric IPv4 address to listen on");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool listening = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                         ::listen(fd, 4096) == 0;
  const std::string why = std::strerror(errno);
  if (!listening && fd >= 0) ::close(fd);
  COHORT_CHECK(listening, "control plane: cannot listen on a TCP port of ", address, ": ", why);
  return fd;
}

PeerLink dial_peer(int peer, const std::string& endpoint, const HandshakeConfig& config, Clock::time_point deadline) {
  const auto colon = endpoint.rfind(':');
  const int fd = hs_connect_until(endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1)), deadline);
  COHORT_CHECK(fd >= 0, "control plane: cannot connect to rank ", peer, " at ", endpoint, " within ",
               config.timeout.count(), " ms");
  const auto fail = [&](const std::string& why) {
    ::close(fd);
    throw Error("control plane: rank " + std::to_string(peer) + " at " + endpoint + " " + why);
  };
  char challenge[4 + kNonce];
  if (!hs_read_exact(fd, challenge, sizeof challenge, deadline) || hs_get_u32(challenge) != kChallenge)
    fail("did not answer the handshake within " + std::to_string(config.timeout.count()) + " ms");
  const std::string theirs_nonce(challenge + 4, kNonce), mine = random_bytes(kNonce);
  const std::string proof =
      hmac_proof(config.secret, "cp-dial", theirs_nonce, mine + hs_identity(config.rank, config.run_id, config.host));
  if (!hs_send_all(fd, hs_hello(config, mine + proof)))
    fail(std::string("failed the handshake: ") + std::strerror(errno));
  char header[kHelloHeader];
  if (!hs_read_exact(fd, header, sizeof header, deadline) || !hs_is_hello(header) || int(hs_get_u32(header + 4)) != peer)
    fail("did not answer the handshake within " + std::to_string(config.timeout.count()) + " ms");
  std::string run_id(hs_get_u32(header + 8), '\0'), host(hs_get_u32(header + 12), '\0'), answer(kProof, '\0');
  if (!hs_read_exact(fd, &run_id[0], run_id.size(), deadline) || !hs_read_exact(fd, &host[0], host.size(), deadline) ||
      !hs_read_exact(fd, &answer[0], kProof, deadline))
    fail("did not answer the handshake within " + std::to_string(config.timeout.count()) + " ms");
  if (run_id != config.run_id) {
    ::close(fd);
    throw Error("control plane: rank " + std::to_string(config.rank) + " of " + job_label(config.run_id) +
                " dialled rank " + std::to_string(peer) + " at " + endpoint + " and found " + job_label(run_id) +
                kTwoJobsHint);
  }
  if (!same_bytes(answer, hmac_proof(config.secret, "cp-accept", mine, theirs_nonce + hs_identity(peer, run_id, host))))
    fail("did not prove it knows the job's secret");
  return PeerLink{peer, fd, host};
}

std::vector<PeerLink> accept_peers(int listen_fd, const HandshakeConfig& config, Clock::time_point deadline) {
  std::vector<PeerLink> accepted;
  std::vector<bool> connected(config.size, false);
  std::vector<hs_Pending> pending;
  const size_t expected = size_t(config.size - config.rank - 1);
  while (accepted.size() < expected) {
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
    auto wake = deadline;
    for (const auto& p : pending) {
      fds.push_back({p.fd, POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    if (Clock::now() >= deadline) {
      for (auto& p : pending) ::close(p.fd);
      for (auto& a : accepted) ::close(a.fd);
      throw Error("control plane: ranks above " + std::to_string(config.rank) + " did not connect within " +
                  std::to_string(config.timeout.count()) + " ms");
    }
    ::poll(fds.data(), fds.size(), hs_remaining_ms(wake) + 1);
    for (size_t i = 0; i < pending.size(); ++i) {
      auto& p = pending[i];
      int rank = -1;
      std::string host;
      if (fds[i + 1].revents != 0) rank = hs_progress(p, config, connected, host);
      else if (Clock::now() >= p.deadline)
        hs_drop(p, config.rank, "it did not prove the job's secret within " + std::to_string(kProofDeadline.count()) + " ms");
      if (rank >= 0) {
        connected[rank] = true;
        accepted.push_back(PeerLink{rank, p.fd, host});
        p.fd = -1;
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const hs_Pending& p) { return p.fd < 0; }),
                  pending.end());
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      hs_Pending p{fd, hs_peer_of(fd), random_bytes(kNonce), "", Clock::now() + kProofDeadline};
      std::string challenge;
      hs_put_u32(challenge, kChallenge);
      if (hs_send_all(fd, challenge + p.nonce)) pending.push_back(std::move(p));
      else ::close(fd);
    }
  }
  for (auto& p : pending) ::close(p.fd);
  return accepted;
}

}  // namespace cohort::detail
