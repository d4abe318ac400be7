// The control plane's connection handshake (see control_handshake.h). Wire, each number a u32:
//   acceptor -> dialler: kChallenge, nonce_a (32 bytes)
//   dialler -> acceptor: kHello, rank, run id size, host size, run id, host, nonce_d (32),
//                        HMAC("cp-dial", nonce_a, ...)
//   acceptor -> dialler: kHello, rank, run id size, host size, run id, host, HMAC("cp-accept", nonce_d, ...)
#include "comm/control_handshake.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cohort/error.h"
#include "comm/control_plane.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "core/socket.h"

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

// One accepted connection on its way to proving itself.
struct hs_Pending {
  net::Fd fd;
  std::string peer, nonce, buffer;
  Clock::time_point deadline;
};

void hs_drop(hs_Pending& p, const HandshakeConfig& config, const std::string& why) {
  COHORT_WARN(config.link, ": rank ", config.rank, " refused ", p.peer, ": ", why);
  p.fd.reset();
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
  if (!same_bytes(proof, hmac_proof(config.secret, config.proof_tag + "-dial", p.nonce,
                                    nonce + hs_identity(rank, run_id, host)))) {
    hs_drop(
        p, config,
        "it does not know the job's secret (claimed rank " + std::to_string(rank) + " of " + job_label(run_id) + ")");
    return -1;
  }
  const std::string mine = hs_identity(config.rank, config.run_id, config.host);
  const std::string answer = hs_hello(config,
                                      hmac_proof(config.secret, config.proof_tag + "-accept", nonce, p.nonce + mine));
  // First, so the dialler can name both jobs too.
  const bool answered = net::write_all(p.fd.get(), answer, p.deadline).ok();
  if (run_id != config.run_id) {
    throw Error(config.link + ": rank " + std::to_string(config.rank) + " of " + job_label(config.run_id) +
                    " was dialled by rank " + std::to_string(rank) + " of " + job_label(run_id) + kTwoJobsHint,
                ErrorKind::kInvalidArgument);
  }
  if (rank <= config.rank || rank >= config.size || connected[rank] || !answered) {
    hs_drop(p, config, "it claims rank " + std::to_string(rank) + ", which is not a rank still to connect");
    return -1;
  }
  return rank;
}

// Reads what `p` sent; its rank once it proved itself (`host` set), -1 while incomplete or when dropped
// (fd empty).
int hs_progress(hs_Pending& p, const HandshakeConfig& config, const std::vector<bool>& connected, std::string& host) {
  char chunk[1024];
  const ssize_t n = ::recv(p.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    hs_drop(p, config, "it closed the connection before proving the job's secret");
    return -1;
  }
  if (n > 0) p.buffer.append(chunk, size_t(n));
  if (p.buffer.size() >= kHelloHeader && !hs_is_hello(p.buffer.data())) {
    hs_drop(p, config, "its first message is not a control-plane handshake");
    return -1;
  }
  if (p.buffer.size() < kHelloHeader ||
      p.buffer.size() < kHelloHeader + hs_get_u32(&p.buffer[8]) + hs_get_u32(&p.buffer[12]) + kNonce + kProof)
    return -1;
  return hs_settle(p, config, connected, host);
}

}  // namespace

net::Fd listen_for_peers(const std::string& address, const std::string& link) {
  const char* bind = std::getenv("COHORT_STORE_BIND");
  const bool any = bind != nullptr && std::string(bind) == "any";
  std::string why;
  net::Fd fd = net::listen_on(any ? "0.0.0.0" : address, 0, why);
  COHORT_CHECK_KIND(kIO, fd, link, ": cannot listen on a TCP port of ", address, ": ", why);
  return fd;
}

PeerLink dial_peer(int peer, const std::string& endpoint, const HandshakeConfig& config, Clock::time_point deadline) {
  const auto colon = endpoint.rfind(':');
  std::string why;
  net::Fd fd = net::connect_until({endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1))}, deadline, &why);
  if (!fd)
    throw Error(str(config.link, ": cannot connect to rank ", peer, " at ", endpoint, " within ",
                    config.timeout.count(), " ms: ", why),
                ErrorKind::kTimeout, {peer});
  // A peer that does not answer is waited-for (timeout); one that answers wrongly is not of this job.
  const auto fail = [&](const std::string& failure, ErrorKind kind = ErrorKind::kTimeout) {
    const Error error(config.link + ": rank " + std::to_string(peer) + " at " + endpoint + " " + failure, kind, {peer});
    throw error;
  };
  const std::string unanswered = "did not answer the handshake within " + std::to_string(config.timeout.count()) +
                                 " ms";
  char challenge[4 + kNonce];
  if (!net::read_exact(fd.get(), challenge, sizeof challenge, deadline).ok() || hs_get_u32(challenge) != kChallenge)
    fail(unanswered);
  const std::string theirs_nonce(challenge + 4, kNonce), mine = random_bytes(kNonce);
  const std::string proof = hmac_proof(config.secret, config.proof_tag + "-dial", theirs_nonce,
                                       mine + hs_identity(config.rank, config.run_id, config.host));
  if (const auto sent = net::write_all(fd.get(), hs_hello(config, mine + proof), deadline); !sent.ok())
    fail("failed the handshake: " + sent.why, ErrorKind::kIO);
  char header[kHelloHeader];
  if (!net::read_exact(fd.get(), header, sizeof header, deadline).ok() || !hs_is_hello(header) ||
      int(hs_get_u32(header + 4)) != peer)
    fail(unanswered);
  std::string run_id(hs_get_u32(header + 8), '\0'), host(hs_get_u32(header + 12), '\0'), answer(kProof, '\0');
  if (!net::read_exact(fd.get(), &run_id[0], run_id.size(), deadline).ok() ||
      !net::read_exact(fd.get(), &host[0], host.size(), deadline).ok() ||
      !net::read_exact(fd.get(), &answer[0], kProof, deadline).ok())
    fail(unanswered);
  if (run_id != config.run_id) {
    throw Error(config.link + ": rank " + std::to_string(config.rank) + " of " + job_label(config.run_id) +
                    " dialled rank " + std::to_string(peer) + " at " + endpoint + " and found " + job_label(run_id) +
                    kTwoJobsHint,
                ErrorKind::kInvalidArgument, {peer});
  }
  if (!same_bytes(answer, hmac_proof(config.secret, config.proof_tag + "-accept", mine,
                                     theirs_nonce + hs_identity(peer, run_id, host))))
    fail("did not prove it knows the job's secret", ErrorKind::kInvalidArgument);
  return PeerLink{peer, std::move(fd), host};
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
      fds.push_back({p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    if (Clock::now() >= deadline) {
      std::vector<int> missing;  // the ranks waited for
      for (int r = config.rank + 1; r < config.size; ++r)
        if (!connected[r]) missing.push_back(r);
      throw Error(config.link + ": ranks above " + std::to_string(config.rank) + " did not connect within " +
                      std::to_string(config.timeout.count()) + " ms",
                  ErrorKind::kTimeout, missing);
    }
    net::poll_fds(fds, net::ms_until(wake) + 1);
    for (size_t i = 0; i < pending.size(); ++i) {
      auto& p = pending[i];
      int rank = -1;
      std::string host;
      if (fds[i + 1].revents != 0) rank = hs_progress(p, config, connected, host);
      else if (Clock::now() >= p.deadline)
        hs_drop(p, config,
                "it did not prove the job's secret within " + std::to_string(kProofDeadline.count()) + " ms");
      if (rank >= 0) {
        connected[rank] = true;
        accepted.push_back(PeerLink{rank, std::move(p.fd), host});
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const hs_Pending& p) { return !p.fd; }),
                  pending.end());
    if (fds[0].revents & POLLIN) {
      net::Fd fd = net::accept_one(listen_fd);
      if (!fd) continue;
      hs_Pending p{std::move(fd), "", random_bytes(kNonce), "", Clock::now() + kProofDeadline};
      p.peer = net::peer_of(p.fd.get());
      std::string challenge;
      hs_put_u32(challenge, kChallenge);
      if (net::write_all(p.fd.get(), challenge + p.nonce, p.deadline).ok()) pending.push_back(std::move(p));
    }
  }
  return accepted;
}

}  // namespace cohort::detail
