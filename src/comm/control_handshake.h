// How two ranks' control-plane connection opens (comm/control_plane.h). The accepting rank sends a
// nonce; the dialling rank answers with its rank, its run id, a nonce of its own and HMAC(secret) over
// both (core/job_secret.h); the acceptor checks the run id (another job is named), then the proof, and
// answers likewise. A connection that proves nothing (a stranger that reached the port, silent or
// partial) is dropped after a short deadline with a line naming its address, and the mesh goes on.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail {

struct HandshakeConfig {
  int rank = 0;
  int size = 1;
  std::string run_id;
  std::string secret;
  std::chrono::milliseconds timeout{300000};  // for messages
};

/// A socket listening on `address` (numeric IPv4; every interface when COHORT_STORE_BIND=any) and a
/// free port; throws cohort::Error naming the address.
int listen_for_peers(const std::string& address);

/// Dials rank `peer` at `endpoint` (HOST:PORT) and proves this rank to it, by `deadline`; returns the
/// socket. Throws cohort::Error naming the peer, the endpoint and both jobs when they differ.
int dial_peer(int peer, const std::string& endpoint, const HandshakeConfig& config,
              std::chrono::steady_clock::time_point deadline);

/// Accepts on `listen_fd` until every rank above config.rank has connected and proved itself, by
/// `deadline`; returns (rank, socket) pairs. Throws cohort::Error when a rank of another job dials.
std::vector<std::pair<int, int>> accept_peers(int listen_fd, const HandshakeConfig& config,
                                              std::chrono::steady_clock::time_point deadline);

}  // namespace cohort::detail
