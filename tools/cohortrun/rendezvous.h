// How the nodes of a job find each other and agree, round by round (round N = restart N).
//
// Protocol (keys under cohortrun/<rdzv-id>/<round>/ in cohort's store hosted by node 0):
//  0. The endpoint's host must resolve (else one line at once, not a join timeout).
//  1. Node 0 hosts the store: with c10d, the node whose address the endpoint host resolves to (the
//     first to bind the port when several do); with static, --node-rank 0. Others connect, retrying
//     until the join timeout. Node 0 publishes its job's run id at `cohortrun-job` (its --rdzv-id,
//     or a fresh one) and its workers' secret (`cohortrun-worker-secret`); a node whose --rdzv-id
//     differs is refused naming both, one without adopts it. Every agent proves the agents' secret
//     (COHORT_JOB_SECRET, else derived from the rendezvous id) before its first request.
//  2. Each other node adds 1 to `joined`; the value is its arrival number (static: it claims
//     `rank/<R>` instead). Node 0 closes the round when --nnodes arrived (or MIN did and last_call
//     passed) by writing `master` (MASTER_ADDR and a free MASTER_PORT for the workers) and `closed`
//     (the node count, or "error:<why>" after the join timeout). Arrivals past the count fail.
//  3. Every node writes `nproc/<rank>` and reads all of them to place its workers' ranks.
//  4. The first node whose group ends badly writes `outcome` (compare-and-set, so one outcome
//     stands): restart (every node starts round N+1), fail or stop. Nodes whose workers all succeed
//     add to `done` and wait for `done` == count or an outcome. Others add to `left` before exiting,
//     and node 0 waits for them, so the store outlives every reader.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "cohortrun/membership.h"
#include "cohortrun/options.h"

namespace cohort::detail::launch {

/// A rendezvous that cannot complete (timeout, too many nodes, lost store): one line saying why.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A termination signal arrived while waiting for other nodes.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int sig) : std::runtime_error("interrupted"), signal(sig) {}
  int signal;
};

/// This node's place after a round closed.
struct RoundInfo {
  int node_rank = 0;
  int node_count = 1;
  int rank_base = 0;   // global rank of this node's local rank 0
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;  // the job's identity for its workers (TORCHELASTIC_RUN_ID)
  std::string secret;  // the secret its workers prove to each other (COHORT_JOB_SECRET)
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  /// Joins round `round` and waits for it to close. Throws RendezvousError or Interrupted.
  virtual RoundInfo join(int round) = 0;
  /// The outcome another node published for `round`, if any (non-blocking).
  virtual std::optional<Outcome> outcome(int round) = 0;
  /// Publishes `mine` unless an outcome stands already; returns the one that stands.
  virtual Outcome publish(int round, const Outcome& mine) = 0;
  /// This node's workers all succeeded.
  virtual void report_done(int round) = 0;
  /// Every node's workers succeeded.
  virtual bool all_done(int round) = 0;
  /// This node is about to exit; node 0 waits (bounded) for the others to have read the outcome.
  virtual void leave(int round) = 0;
  /// Where the rendezvous lives, for messages.
  virtual std::string where() const = 0;
};

/// A store-based rendezvous when --nnodes allows more than one node, else a local one (no store).
/// Throws RendezvousError when the rendezvous host (or --master-addr) does not resolve.
std::unique_ptr<Rendezvous> make_rendezvous(const LaunchOptions& options);

}  // namespace cohort::detail::launch
