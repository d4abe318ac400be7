// How two ranks' control-plane connection opens (comm/control_plane.h). The accepting rank sends a
// nonce; the dialling rank answers with its rank, its run id, its host name, a nonce of its own and
// HMAC(secret) over them (core/job_secret.h); the acceptor checks the run id (another job is named),
// then the proof, and answers likewise. The host names let failures name where a rank runs. A connection that proves
// nothing (a stranger that reached the port, silent or partial) is dropped after a short deadline with a line naming
// its address, and the mesh goes on.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/socket.h"

namespace cohort::detail {

struct HandshakeConfig {
  int rank = 0;
  int size = 1;
  std::string run_id;
  std::string secret;
  std::string host;                           // this rank's host name, told to every peer
  std::chrono::milliseconds timeout{300000};  // for messages
  std::string link = "control plane";         // which mesh, as messages name it
  std::string proof_tag = "cp";               // what the proofs are for: a dial to another mesh fails them
};

/// One connected peer: its rank, the socket (blocking) and the host name it told.
struct PeerLink {
  int rank = -1;
  net::Fd fd;
  std::string host;
};

/// A socket listening on `address` (numeric; every interface when COHORT_STORE_BIND=any) and a free
/// port; throws cohort::Error naming the address and why.
net::Fd listen_for_peers(const std::string& address, const std::string& link = "control plane");

/// Dials rank `peer` at `endpoint` (HOST:PORT) and proves this rank to it, by `deadline`; returns the
/// link. Throws cohort::Error naming the peer, the endpoint and both jobs when they differ.
PeerLink dial_peer(int peer, const std::string& endpoint, const HandshakeConfig& config,
                   std::chrono::steady_clock::time_point deadline);

/// Accepts on `listen_fd` until every rank above config.rank has connected and proved itself, by
/// `deadline`; returns their links. Throws cohort::Error when a rank of another job dials.
std::vector<PeerLink> accept_peers(int listen_fd, const HandshakeConfig& config,
                                   std::chrono::steady_clock::time_point deadline);

}  // namespace cohort::detail
