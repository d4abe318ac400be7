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
//  5. Elastic (torchelastic's semantics): node 0 writes `cohortrun/<rdzv-id>/round` (the round it
//     closed) and the round's `restarts` (restarts after failures so far, which --max-restarts
//     bounds). A node that arrives while round N runs with fewer than MAX nodes joins round N+1 and
//     waits there; every node checks round N+1's `joined` each --monitor-interval and, when a node
//     waits, writes the outcome `rescale`: every node restarts into round N+1, which then closes
//     with the waiting node in it. A node lost in round N makes the others' workers fail: the
//     outcome is restart, and round N+1 closes without it (MIN nodes, after last_call_timeout).
//     A node that arrives while round N runs with MAX nodes waits until round N ends: a restart or
//     rescale outcome takes it into round N+1 (a node whose host died comes back in its place), the
//     job's end, a failed round or join_timeout refuses it.
//     Node 0 writes `over` (how the job ended) when it leaves, so that a waiting node ends too.
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

/// The job ended (`how`: "succeeded", "failed", "stopped") while this node waited to join it.
class JobOver : public std::runtime_error {
 public:
  explicit JobOver(const std::string& how_ended) : std::runtime_error("job over"), how(how_ended) {}
  std::string how;
};

struct RoundCounts {
  int waiting = 0;  // nodes that arrived for the next round
  int done = 0;     // nodes whose workers all succeeded in this round
};

/// This node's place after a round closed.
struct RoundInfo {
  int round = 0;             // the round joined: the one asked for, or a later one for a node that came late
  int failure_restarts = 0;  // restarts after worker failures before this round (node 0's count)
  int node_rank = 0;
  int node_count = 1;
  int rank_base = 0;  // global rank of this node's local rank 0
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;     // the job's identity for its workers (TORCHELASTIC_RUN_ID)
  std::string secret;     // the secret its workers prove to each other (COHORT_JOB_SECRET)
  std::string launch_id;  // this launch, the same on every node and across restarts (COHORT_LAUNCH_ID)
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  /// Joins round `round` (or, for a node that comes while the job runs, the round after the running
  /// one) and waits for it to close; node 0 publishes `failure_restarts`, the others read it.
  /// Throws RendezvousError, JobOver or Interrupted.
  virtual RoundInfo join(int round, int failure_restarts) = 0;
  /// Nodes waiting for the round after `round` (torchelastic's num_nodes_waiting) and nodes whose
  /// workers finished `round`.
  virtual RoundCounts counts(int round) = 0;
  /// The outcome another node published for `round`, if any (non-blocking).
  virtual std::optional<Outcome> outcome(int round) = 0;
  /// Publishes `mine` unless an outcome stands already; returns the one that stands.
  virtual Outcome publish(int round, const Outcome& mine) = 0;
  /// This node's workers all succeeded.
  virtual void report_done(int round) = 0;
  /// Every node's workers succeeded.
  virtual bool all_done(int round) = 0;
  /// This node is about to exit; node 0 says how the job ended (`how`, for nodes still waiting to
  /// join) and waits (bounded) for the others to have read the outcome.
  virtual void leave(int round, const std::string& how) = 0;
  /// Where the rendezvous lives, for messages.
  virtual std::string where() const = 0;
};

/// A store-based rendezvous when --nnodes allows more than one node, else a local one (no store).
/// Throws RendezvousError when the rendezvous host (or --master-addr) does not resolve.
std::unique_ptr<Rendezvous> make_rendezvous(const LaunchOptions& options);

}  // namespace cohort::detail::launch
