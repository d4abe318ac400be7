// CommImpl: the machinery under cohort::Comm. Each collective becomes a PendingOp that is
// (1) given the next sequence number, (2) agreed on by every rank over the control plane (fingerprint
// hash), (3) started on the transport chosen for it (comm/transport.h), (4) waited for with the control
// plane watched for dead or aborting peers and the timeout counted. The first failure poisons the Comm:
// every later call throws the same error, and every peer is told (abort notice). Async ops are agreed
// and launched in issue order by one launcher thread so the caller (e.g. an autograd hook) never waits
// on the network.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/comm_explain.h"
#include "comm/comm_failure.h"
#include "comm/control_plane.h"
#include "comm/fingerprint.h"
#include "comm/hier_transport.h"
#include "comm/p2p.h"
#include "comm/p2p_shm.h"
#include "comm/shm_mailbox.h"
#include "comm/shm_transport.h"
#include "comm/transport.h"
#include "compat/c10d_compat.h"

namespace cohort::detail {

class CommImpl;

class PendingOp : public std::enable_shared_from_this<PendingOp> {
 public:
  Fingerprint fingerprint;
  int64_t seq = -1;
  int peer = -1;            // point to point: the other rank
  int tag = 0;              // point to point: the channel
  bool inline_p2p = false;  // CUDA: NCCL pairs messages in issue order, so no waiter threads
  /// A blocking send/recv: the caller waits anyway, so its own thread does the waiting (no thread hop).
  bool caller_waits = false;
  /// What moves, and the transport that moves it after agreement (CommImpl::transport_for); null when
  /// nothing moves (a barrier, empty tensors). A message through the segment's rings (p2p_shm.h)
  /// has none either: its data.buffer goes to the mailbox.
  OpData data;
  Transport* transport = nullptr;
  /// Runs once on the waiting thread after the data arrived (copy back, unpack).
  std::function<void()> finish;
  /// CUDA tensors: done only when the GPU finished. An NCCL Work's future completes when the kernel is
  /// queued, so the waiting thread polls Work::isCompleted() (a CUDA event query) instead, and a hang
  /// on the GPU is still named by the timeout (docs/design/cuda.md).
  bool device_completion = false;

 private:
  // The Comm's parts that run an op's life: launch and wait, point to point, messages, the timeline.
  friend class CommImpl;
  friend class PointToPoint;
  friend class ShmPointToPoint;
  friend class CommExplainer;
  friend void trace_phases(const PendingOp& op, const std::string& group);
  CommImpl* comm_ = nullptr;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool launched_ = false, data_done_ = false, finished_ = false;
  Clock::time_point started_;
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> then_;  // the transport's step once work_ completed (Started::then)
  CommFailure error_;
  bool notice_ = false;          // point to point: the sender's notice arrived (receive side)
  std::string transport_error_;  // point to point: what the transport raised while a waiter thread waited
  friend class cohort::Work;
  // The timeline (core/trace_recorder.h): when this op was queued, agreed on, and its data arrived;
  // -1 while not recorded.
  int64_t queued_us_ = -1, agreed_us_ = -1, data_us_ = -1;
  const char* transport_ = "gloo";
};

/// The timeline: records a finished collective's phases (comm/comm_trace.cpp).
void trace_phases(const PendingOp& op, const std::string& group);

/// Thrown by a shared-memory wait's watch: the message is already the final explanation.
struct TransportStopped {
  CommFailure message;
};

struct CommConfig {
  c10::intrusive_ptr<c10d::Store> store;  // null in a world of one
  int rank = 0;
  int size = 1;
  std::string local_address;
  std::chrono::milliseconds timeout{300000};
  bool use_nccl = false;
  bool shm = true;                    // shared-memory data path when every rank is on this host
  bool hierarchical = true;           // across hosts: shared memory within each, TCP among leaders
  int test_hosts_split = 0;           // tests: group one host's ranks as if on this many hosts (0: off)
  size_t shm_slot_bytes = 512 << 10;  // its chunk: bytes per rank
  std::string tcp_congestion;         // the links between hosts: TCP congestion control ("": the system's)
  std::string group_name;             // empty for the world; a group's name for messages
  std::vector<int> world_ranks;       // a group's world rank of each of its ranks; empty for the world
  std::string run_id;                 // the job (world/job_identity.h): control-plane peers must match
  std::string secret;                 // the job's secret (core/job_secret.h): control-plane peers prove it
};

class CommImpl {
 public:
  explicit CommImpl(CommConfig config);
  ~CommImpl();

  int rank() const { return config_.rank; }
  int size() const { return config_.size; }
  std::chrono::milliseconds timeout() const { return config_.timeout; }
  int64_t sequence_number() const;
  const CommConfig& config() const { return config_; }
  /// The world rank of this Comm's rank `r`.
  int world_rank(int r) const { return explainer_.world_rank(r); }
  /// Numbers the groups made from this Comm (collective, so every rank counts alike).
  int64_t next_group_id();
  /// How this Comm names its ranks, ops and failures (rank_label, ranks_label, where, ...).
  const CommExplainer& explainer() const { return explainer_; }
  std::string rank_label(int group_rank) const { return explainer_.rank_label(group_rank); }
  std::string ranks_label(const std::vector<int>& group_ranks) const { return explainer_.ranks_label(group_ranks); }
  std::string where() const { return explainer_.where(); }
  c10d::Store* store() const { return config_.store.get(); }
  const c10::intrusive_ptr<c10d::Store>& store_ptr() const { return config_.store; }

  /// The shared-memory transport, or null (ranks on several hosts, a world of one, COHORT_SHM=0).
  ShmTransport* shm() const { return shm_.get(); }
  /// Point to point through the segment's rings, or null where shm() is.
  ShmMailbox* mailbox() const { return mailbox_.get(); }

  /// The hierarchical transport across hosts (comm/hier_transport.h), or null.
  HierTransport* hier() const { return hier_; }
  /// The transport that runs `op`: the first that can of the hierarchical, shared-memory, NCCL and
  /// Gloo ones this Comm has; null in a world of one.
  Transport* transport_for(const OpData& op) const;
  /// True when CUDA tensors go through NCCL.
  bool has_nccl() const { return bool(nccl_); }

  /// Issues an op: with async=false and nothing queued it is agreed and launched on the caller's thread
  /// (barrier, send/recv); otherwise the launcher thread does it in issue order.
  std::shared_ptr<PendingOp> submit(std::shared_ptr<PendingOp> op, bool async);
  void wait(PendingOp& op);
  /// An op with no collective of its own (its finish() waits on others): completes when waited on.
  std::shared_ptr<PendingOp> wrap_local(std::shared_ptr<PendingOp> op);
  /// Point to point, never queued behind collectives: through the control plane and c10d (p2p.h), or
  /// through the shared-memory rings (p2p_shm.h) where mailbox() is not null.
  PointToPoint& p2p() { return p2p_; }
  ShmPointToPoint& shm_p2p() { return shm_p2p_; }
  bool is_completed(PendingOp& op);
  /// The ranks that died (closed their control-plane connection without a goodbye); none in a world
  /// of one. Non-blocking; for shutdown paths (ControlPlane::dead_peers).
  std::vector<int> dead_peers() { return control_ ? control_->dead_peers() : std::vector<int>{}; }
  /// Comm::abort: poisons this Comm with `reason` and tells the peers.
  void abort(const std::string& reason) { poison({reason, ErrorKind::kAborted, {world_rank(config_.rank)}}); }

  // An op's life, for the point-to-point parts.
  ControlPlane& control() { return *control_; }
  /// Point to point: numbers the op on its (peer, tag) channel and sets its deadline clock; throws the
  /// Comm's failure once it is poisoned.
  void number_p2p(PendingOp& op, bool send);
  /// Runs `body` on a thread of its own (p2p waits); joined at destruction. `prompt`: the body ends
  /// within milliseconds once the Comm is poisoned or closing, so it is joined even then.
  void spawn_waiter(std::function<void()> body, bool prompt = false);
  void mark_launched(PendingOp& op, const CommFailure& error);
  /// The first failure becomes the Comm's: records it (once), tells the peers, returns the final one.
  CommFailure poison(const CommFailure& error);
  /// Why a transfer in flight must stop now: the Comm was poisoned (another thread failed an op) or is
  /// being destroyed; nullopt while healthy.
  std::optional<CommFailure> stopped_reason();

 private:
  void launch(PendingOp& op);
  /// Makes the transports (constructor): the segment of this host, or the hierarchical one across
  /// hosts, then NCCL and Gloo.
  void make_transports();
  /// Agreement alone (the segment's barrier on one host, else the control plane); "" when agreed.
  CommFailure agree(PendingOp& op, uint64_t hash, Clock::time_point deadline, const ShmWatch& watch);
  /// Agrees on `op` with every rank (through the shared-memory segment on one host, else the control
  /// plane) and moves or starts its data; returns the failure, "" when all went well.
  CommFailure agree_and_move(PendingOp& op);
  void launcher_loop();
  /// Poisons the Comm with `message`, tells the peers, and throws it.
  [[noreturn]] void fail(PendingOp& op, const CommFailure& failure);
  void await_data(PendingOp& op);
  void await_device(PendingOp& op, Clock::time_point deadline);
  /// A transport error: waits briefly for the control plane to name a dead peer, then fails with it.
  [[noreturn]] void fail_transport(PendingOp& op, const std::string& what);

  CommConfig config_;
  std::string prefix_ = "cohort/comm";  // store key prefix (a group's store carries its own: groups.cpp)
  std::unique_ptr<ControlPlane> control_;
  CommExplainer explainer_;
  PointToPoint p2p_{*this};
  ShmPointToPoint shm_p2p_{*this};
  c10::intrusive_ptr<ProcessGroupBase> gloo_, nccl_;
  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<ShmMailbox> mailbox_;                 // point to point through shm_'s rings; null without shm_
  std::vector<std::unique_ptr<Transport>> transports_;  // in order of preference
  HierTransport* hier_ = nullptr;                       // one of transports_, or null

  mutable std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<PendingOp>> queue_;
  bool launching_ = false, stop_ = false;
  int64_t next_seq_ = 0;
  int64_t next_group_ = 0;
  // Per (peer, tag): the n-th send to a peer on a tag pairs with the peer's n-th receive on it.
  std::map<std::pair<int, int>, int64_t> send_seq_, recv_seq_;
  struct Waiter {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
    bool prompt = false;
  };
  std::vector<Waiter> waiters_;
  CommFailure poisoned_;  // the first failure; empty while healthy
  std::thread launcher_;
};

}  // namespace cohort::detail
