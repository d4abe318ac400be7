// How a Comm names ranks, ops and failures in its messages (comm_explain.h).
#include "comm/comm_explain.h"

#include <sstream>

#include "comm/comm_impl.h"
#include "comm/failure_report.h"
#include "comm/op_util.h"
#include "core/check.h"

namespace cohort::detail {

CommExplainer::CommExplainer(const CommConfig& config, std::string prefix, const ControlPlane* control)
    : config_(config), prefix_(std::move(prefix)), control_(control) {
  if (control_ == nullptr) return;
  for (int r = 0; r < config_.size; ++r) spans_hosts_ |= control_->host_of(r) != control_->host_of(config_.rank);
}

int CommExplainer::world_rank(int r) const { return config_.world_ranks.empty() ? r : config_.world_ranks.at(r); }

std::string CommExplainer::rank_label(int group_rank) const {
  if (config_.world_ranks.empty()) return "rank " + std::to_string(group_rank);
  return "rank " + std::to_string(config_.world_ranks.at(group_rank)) + " (group rank " + std::to_string(group_rank) +
         " of '" + config_.group_name + "')";
}

std::vector<int> CommExplainer::world_ranks_of(const std::vector<int>& group_ranks) const {
  std::vector<int> out;
  for (int r : group_ranks) out.push_back(world_rank(r));
  return out;
}

std::string CommExplainer::ranks_label(const std::vector<int>& group_ranks) const {
  std::string out;
  if (config_.world_ranks.empty()) {
    out = group_ranks.size() > 1 ? "ranks " : "rank ";
    for (size_t i = 0; i < group_ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(group_ranks[i]);
    return out;
  }
  for (size_t i = 0; i < group_ranks.size(); ++i) out += (i ? ", " : "") + rank_label(group_ranks[i]);
  return out;
}

std::string CommExplainer::ranks_on_hosts(const std::vector<int>& group_ranks) const {
  std::vector<RankOnHost> ranks;
  for (int r : group_ranks)
    ranks.push_back({config_.world_ranks.empty() ? std::to_string(r) : rank_label(r), control_->host_of(r)});
  const std::string prefix = !config_.world_ranks.empty() ? "" : group_ranks.size() > 1 ? "ranks " : "rank ";
  return prefix + join_on_hosts(ranks, spans_hosts_);
}

std::string CommExplainer::where() const {
  return config_.world_ranks.empty() ? "" : " in group '" + config_.group_name + "'";
}

CommFailure CommExplainer::start_failure(const PendingOp& op, const Transport& transport,
                                         const std::exception& e) const {
  const std::string name = transport.name();
  if (name == "shm") return shm_failure(op, e);
  if (name == "hier")
    return failure_from(describe(op) + " failed in the hierarchical transport: " + first_line(e.what()), e);
  return failure_from(describe(op) + " could not start: " + first_line(e.what()), e);
}

std::string CommExplainer::describe(const PendingOp& op) const {
  if (op.peer >= 0) {
    const bool send = op.fingerprint.op == OpKind::kSend;
    return std::string(send ? "send #" : "recv #") + std::to_string(op.seq) + " (tag " + std::to_string(op.tag) + ") " +
           (send ? "to " : "from ") + rank_label(op.peer) + " " + op.fingerprint.tensor_text() + where();
  }
  return "collective #" + std::to_string(op.seq) + " " + op.fingerprint.describe() + where();
}

CommFailure CommExplainer::shm_failure(const PendingOp& op, const std::exception& e) const {
  return failure_from(describe(op) + " failed in the shared-memory transport: " + first_line(e.what()), e);
}

CommFailure CommExplainer::explain(const PeerFailure& failure, const PendingOp& op) const {
  const std::string what = describe(op);
  const std::vector<int> peer_rank = failure.peer >= 0 ? std::vector<int>{world_rank(failure.peer)}
                                                       : std::vector<int>{};
  switch (failure.kind) {
    case PeerFailure::kDied: {
      const std::string peer = ranks_on_hosts({failure.peer});
      if (!failure.reason.empty())
        return {what + " failed: " + peer + " left: " + failure.reason, ErrorKind::kPeerDied, peer_rank};
      return {what + " failed: " + peer + " died (its process exited or was killed without shutting down)",
              ErrorKind::kPeerDied, peer_rank};
    }
    case PeerFailure::kAborted:
      if (failure.peer == config_.rank)
        return {what + " interrupted: this Comm is shutting down", ErrorKind::kAborted, peer_rank};
      return {what + " failed because " + rank_label(failure.peer) + " failed: " + failure.reason, ErrorKind::kAborted,
              peer_rank};
    case PeerFailure::kTimedOut: return explain_timeout(op);
  }
  return what + " failed";
}

CommFailure CommExplainer::explain_desync(const PendingOp& op) const {
  FailureReport report(*config_.store, prefix_ + "/desync", config_.rank, config_.size);
  auto reports = report.exchange(std::to_string(op.seq) + " " + op.fingerprint.describe(), std::chrono::seconds(10));
  std::ostringstream out;
  out << "collective mismatch (desync) at collective #" << op.seq << where() << ": ranks called different "
      << "collectives:";
  std::vector<int> differing;  // the ranks whose call is not this rank's
  for (int r = 0; r < config_.size; ++r) {
    if (reports[r] != reports[config_.rank]) differing.push_back(world_rank(r));
    out << " " << rank_label(r) << ": ";
    if (!reports[r]) {
      out << "(no report)";
    } else {
      const auto space = reports[r]->find(' ');
      out << "#" << reports[r]->substr(0, space) << " " << reports[r]->substr(space + 1);
    }
    out << (r + 1 < config_.size ? ";" : ".");
  }
  out << " Every rank must call the same collectives, in the same order, with the same shapes and dtypes.";
  return {out.str(), ErrorKind::kDesync, differing};
}

CommFailure CommExplainer::explain_timeout(const PendingOp& op) const {
  if (op.peer >= 0) return explain_p2p_timeout(op);
  FailureReport report(*config_.store, prefix_ + "/stuck", config_.rank, config_.size);
  auto reports = report.exchange(std::to_string(op.seq) + " " + op.fingerprint.describe(), std::chrono::seconds(2));
  std::vector<int> missing;
  std::ostringstream others;
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank) continue;
    if (!reports[r]) {
      missing.push_back(r);
      continue;
    }
    const auto space = reports[r]->find(' ');
    if (reports[r]->substr(0, space) != std::to_string(op.seq)) {
      missing.push_back(r);
      others << " " << rank_label(r) << " is waiting in collective #" << reports[r]->substr(0, space) << " "
             << reports[r]->substr(space + 1) << ".";
    }
  }
  std::ostringstream out;
  out << describe(op) << " timed out after " << config_.timeout.count() << " ms: ";
  if (missing.empty()) {
    out << "every rank arrived but the transfer did not finish";
  } else {
    out << ranks_on_hosts(missing) << " never arrived.";
  }
  out << others.str() << " (timeout: InitOptions::timeout or COHORT_TIMEOUT seconds)";
  return {out.str(), ErrorKind::kTimeout, world_ranks_of(missing)};
}

CommFailure CommExplainer::explain_p2p_mismatch(const PendingOp& op, uint64_t sent_seq, const std::string& sent) const {
  return {"point-to-point mismatch at " + describe(op) + ": this rank receives into " + op.fingerprint.tensor_text() +
              " but " + rank_label(op.peer) + " sent #" + std::to_string(sent_seq) + " " + sent +
              ". A receive's tensor must have the sender's dtype and shape (recv_object takes sizes the receiver does "
              "not know)",
          ErrorKind::kDesync,
          {world_rank(op.peer)}};
}

CommFailure CommExplainer::explain_p2p_timeout(const PendingOp& op) const {
  bool notice = false;
  {
    std::lock_guard<std::mutex> lock(op.mutex_);
    notice = op.notice_;
  }
  std::string out = describe(op) + " timed out after " + std::to_string(config_.timeout.count()) +
                    " ms: " + rank_label(op.peer);
  if (op.fingerprint.op == OpKind::kSend)
    out += " did not receive it (no matching recv on tag " + std::to_string(op.tag) + ", or it is stuck elsewhere)";
  else if (!notice)
    out += " never sent it (no matching send on tag " + std::to_string(op.tag) + ", or it is stuck elsewhere)";
  else out += " sent it but the transfer did not finish";
  return {out + " (timeout: InitOptions::timeout, GroupOptions::timeout or COHORT_TIMEOUT seconds)",
          ErrorKind::kTimeout,
          {world_rank(op.peer)}};
}

}  // namespace cohort::detail
