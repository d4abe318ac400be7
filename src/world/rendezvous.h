// Rendezvous: the store every rank meets at (rank 0 hosts cohort's own store, store_server.h, on the
// address the ranks use, never every interface unless COHORT_STORE_BIND=any), and the wait until every
// rank has arrived, whose failure names the address, the port and who arrived. An unknown host is
// named at once, a port in use names the job that holds it, and a rank of another job is refused
// before it announces itself (job_identity.h). Under torchrun the store is torchrun's (c10d TCPStore).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace cohort::detail {

struct RendezvousConfig {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{300000};
  /// False when a launcher already hosts the store at MASTER_ADDR:MASTER_PORT (torchrun's agent
  /// store): then rank 0 connects as a client like every other rank.
  bool rank0_hosts = true;
  /// This rank's job (LaunchEnv::run_id): checked before the rank announces itself.
  std::string run_id;
  /// The job's secret (core/job_secret.h) and where it came from; "" secret: derived from run_id.
  std::string secret;
  std::string secret_source;
};

/// Where rank 0's store listens for a job that meets at `master_addr`: COHORT_STORE_BIND=any is every
/// interface (""), another value that address; unset, MASTER_ADDR's own address when it is one of
/// this host's (loopback for a one-host job), else the address of the interface that routes to it.
std::string store_bind_address(const std::string& master_addr, int master_port);

/// Rank 0 hosts cohort's store, the others connect and prove the job's secret; errors name the address and port (and,
/// for a port in use, the job that holds it). MASTER_ADDR that does not resolve is an Error at once.
c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousConfig& config);

/// Proves this rank belongs to the store's job (refusing a stranger naming both jobs), announces it and
/// waits for all; on timeout lists the ranks that did and did not arrive.
void wait_for_all_ranks(c10d::Store& store, const RendezvousConfig& config);

/// The ranks r with arrived[r] == which as runs ("0, 2-5, 9"); past 20 runs, "... and N more".
std::string rank_runs(const std::vector<bool>& arrived, bool which);

/// The address of this host's interface that routes to `master_addr` (what peers dial).
std::string local_address_towards(const std::string& master_addr, int master_port);

}  // namespace cohort::detail
