// How a Comm names its ranks, its ops and their failures in messages: an op's description, a dead or
// aborting peer, a desync (every rank's report of what it called), a timeout (the ranks that never
// arrived, and where the others wait), a transport's failure.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "comm/comm_failure.h"
#include "comm/control_plane.h"

namespace cohort::detail {

class PendingOp;
class Transport;
struct CommConfig;

class CommExplainer {
 public:
  /// `control`: null in a world of one. `prefix`: the Comm's store key prefix (the failure reports').
  CommExplainer(const CommConfig& config, std::string prefix, const ControlPlane* control);

  /// The world rank of the Comm's rank `r`.
  int world_rank(int r) const;
  std::vector<int> world_ranks_of(const std::vector<int>& group_ranks) const;
  /// "rank 3" in the world; "rank 3 (group rank 1 of 'data')" in a group.
  std::string rank_label(int group_rank) const;
  /// "rank 3" / "ranks 2, 3" in the world; each rank as rank_label in a group.
  std::string ranks_label(const std::vector<int>& group_ranks) const;
  /// ranks_label with the hosts the ranks run on, "ranks 2, 3 (host n2)", when the Comm's ranks are on
  /// several hosts (on one host, the host tells nothing). For failures: where to look.
  std::string ranks_on_hosts(const std::vector<int>& group_ranks) const;
  /// "" in the world, " in group 'data'" in a group: appended to the collective in messages.
  std::string where() const;
  /// "collective #4 allreduce(sum) float32 [3]" (+ where()): how messages name an op.
  std::string describe(const PendingOp& op) const;

  /// "<op> failed in the shared-memory transport: <what>" or, for c10d, "<op> could not start: <what>".
  CommFailure start_failure(const PendingOp& op, const Transport& transport, const std::exception& e) const;
  /// "<op> failed in the shared-memory transport: <what>".
  CommFailure shm_failure(const PendingOp& op, const std::exception& e) const;
  CommFailure explain(const PeerFailure& failure, const PendingOp& op) const;
  /// Exchanges every rank's call through the store (10 s at most) and names those that differ.
  CommFailure explain_desync(const PendingOp& op) const;
  /// Exchanges where every rank waits (2 s at most) and names those that never arrived.
  CommFailure explain_timeout(const PendingOp& op) const;
  CommFailure explain_p2p_timeout(const PendingOp& op) const;
  /// A receive whose sender's message #`sent_seq` was `sent` ("dtype [shape]"), not what it expects.
  CommFailure explain_p2p_mismatch(const PendingOp& op, uint64_t sent_seq, const std::string& sent) const;

 private:
  const CommConfig& config_;
  std::string prefix_;
  const ControlPlane* control_;
  bool spans_hosts_ = false;  // the ranks' hosts (control_->host_of) are not all one
};

}  // namespace cohort::detail
