// CommImpl: agreement, launch, wait and failure handling for every collective (see comm_impl.h).
#include "comm/comm_impl.h"

#include <ATen/core/ivalue.h>

#include <atomic>
#include <sstream>

#include "comm/failure_report.h"
#include "comm/op_util.h"
#include "comm/transports.h"
#include "core/check.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/trace_recorder.h"

namespace cohort::detail {
namespace {

// How long a waiting thread sleeps between looks at the control plane while data moves.
constexpr auto kWatchInterval = std::chrono::milliseconds(50);

// Marks a fingerprint whose data moves through the shared-memory segment (see agree_and_move).
constexpr uint64_t kShmPathBit = uint64_t(1) << 63;

// The control plane of a Comm of several ranks (none in a world of one: every op is local).
std::unique_ptr<ControlPlane> make_control_plane(const CommConfig& config, const std::string& prefix) {
  if (config.size == 1) return nullptr;
  return std::make_unique<ControlPlane>(
      *config.store, ControlPlaneConfig{prefix, config.rank, config.size, config.local_address, config.timeout,
                                        config.run_id, config.secret});
}

}  // namespace

CommImpl::CommImpl(CommConfig config)
    : config_(std::move(config)),
      control_(make_control_plane(config_, prefix_)),
      explainer_(config_, prefix_, control_.get()) {
  if (config_.size == 1) return;  // a world of one: no sockets, every op is local
  BackendConfig backend{config_.store, config_.rank, config_.size, config_.local_address,
                        config_.timeout + std::chrono::seconds(5)};
  gloo_ = make_gloo(backend);
  if (config_.use_nccl) nccl_ = make_nccl(backend);
  make_transports();
}

void CommImpl::make_transports() {
  std::vector<std::string> hosts(config_.size);
  for (int r = 0; r < config_.size; ++r) {
    hosts[r] = control_->host_of(r);
    // Tests: consecutive blocks of ranks as if each were a host of its own.
    if (config_.test_hosts_split > 1) hosts[r] = "split-" + std::to_string(r * config_.test_hosts_split / config_.size);
  }
  const HostLayout layout = HostLayout::of(hosts);
  std::unique_ptr<HierTransport> hier;
  if (layout.valid()) {
    CrossHostLinkConfig link;
    link.local_address = config_.local_address;
    link.run_id = config_.run_id;
    link.secret = config_.secret;
    link.host_name = control_->host_of(config_.rank);
    link.timeout = config_.timeout;
    link.congestion = config_.tcp_congestion;
    hier = HierTransport::negotiate({config_.store, prefix_, config_.rank, config_.size, layout,
                                     config_.shm && config_.hierarchical, config_.shm_slot_bytes, link});
  } else {
    shm_ = ShmTransport::negotiate(*config_.store, prefix_, config_.rank, config_.size, config_.shm,
                                   config_.shm_slot_bytes);
  }
  if (shm_) mailbox_ = std::make_unique<ShmMailbox>(*shm_);
  hier_ = hier.get();
  if (hier) transports_.push_back(std::move(hier));
  if (shm_) transports_.push_back(std::make_unique<ShmCollectives>(*shm_));
  if (nccl_) transports_.push_back(std::make_unique<C10dTransport>(*nccl_, config_.size, true));
  transports_.push_back(std::make_unique<C10dTransport>(*gloo_, config_.size, false));
}

Transport* CommImpl::transport_for(const OpData& op) const {
  for (const auto& transport : transports_)
    if (transport->can_run(op)) return transport.get();
  return nullptr;
}

CommImpl::~CommImpl() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (control_) control_->interrupt();
  if (launcher_.joinable()) launcher_.join();
  // Point-to-point waiters end once their transfer does (or c10d's timeout passes); a poisoned Comm
  // leaks its process group below, so those blocked in it are left to finish on their own.
  for (auto& waiter : waiters_) {
    // A shared-memory waiter must be joined: it reads the segment and the mailbox destroyed below.
    if (poisoned_.empty() || waiter.prompt) waiter.thread.join();
    else waiter.thread.detach();
  }
  if (!poisoned_.empty()) {
    // A failed collective may still block a c10d worker thread until c10d's own timeout; destroying
    // the process group would join it and hang this process. Leak it: the process is failing anyway.
    gloo_.release();
    nccl_.release();
    return;
  }
  // An ordered teardown: NCCL communicators go while CUDA still works (see shutdown_backend).
  if (nccl_) shutdown_backend(*nccl_);
  if (gloo_) shutdown_backend(*gloo_);
}

int64_t CommImpl::sequence_number() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_seq_;
}

int64_t CommImpl::next_group_id() {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_group_++;
}

std::shared_ptr<PendingOp> CommImpl::submit(std::shared_ptr<PendingOp> op, bool async) {
  op->comm_ = this;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!poisoned_.empty()) throw poisoned_.error();
  op->seq = next_seq_++;
  if (trace::enabled()) op->queued_us_ = trace::now_us();
  if (config_.size == 1) {
    op->launched_ = op->data_done_ = true;
    return op;
  }
  if (!async && queue_.empty() && !launching_) {
    launching_ = true;
    lock.unlock();
    launch(*op);
    lock.lock();
    launching_ = false;
    lock.unlock();
    queue_cv_.notify_all();
    return op;
  }
  queue_.push_back(op);
  if (!launcher_.joinable()) launcher_ = std::thread([this] { launcher_loop(); });
  lock.unlock();
  queue_cv_.notify_all();
  return op;
}

std::shared_ptr<PendingOp> CommImpl::wrap_local(std::shared_ptr<PendingOp> op) {
  op->comm_ = this;
  op->launched_ = op->data_done_ = true;
  return op;
}

void CommImpl::launcher_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !launching_); });
    if (queue_.empty() && stop_) return;
    if (queue_.empty()) continue;
    auto op = queue_.front();
    queue_.pop_front();
    launching_ = true;
    lock.unlock();
    launch(*op);
    lock.lock();
    launching_ = false;
    queue_cv_.notify_all();
  }
}

void CommImpl::launch(PendingOp& op) {
  op.started_ = Clock::now();
  CommFailure error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = poisoned_;
  }
  if (error.empty()) error = agree_and_move(op);
  if (!error.empty()) error = poison(error);
  if (op.work_ && !op.device_completion) {
    // Completion is signalled through the future so the waiting thread can watch peers meanwhile.
    op.work_->getFuture()->addCallback([self = op.shared_from_this()](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->queued_us_ >= 0) self->data_us_ = trace::now_us();
      self->data_done_ = true;
      self->cv_.notify_all();
    });
  }
  std::lock_guard<std::mutex> lock(op.mutex_);
  op.error_ = error;
  op.launched_ = true;
  if (!op.work_) op.data_done_ = true;  // device_completion: await_data polls the Work
  op.cv_.notify_all();
}

CommFailure CommImpl::agree_and_move(PendingOp& op) {
  const auto deadline = op.started_ + config_.timeout;
  Transport* transport = op.transport;
  const bool fused = transport && transport->agrees();  // the segment's barrier carries the agreement
  op.transport_ = transport ? transport->name() : op.device_completion && nccl_ ? "nccl" : "gloo";
  // The path is part of what must match: a rank moving data through the segment while a peer waits in
  // Gloo would otherwise hang until the timeout instead of being named a desync.
  const uint64_t hash = op.fingerprint.hash(uint64_t(op.seq)) ^ (fused ? kShmPathBit : 0);
  auto watch = [&] {
    if (auto failure = control_->check_peers()) throw TransportStopped{explainer_.explain(*failure, op)};
    // The caller's thread may have failed this op first (it watches too), or the Comm is closing:
    // then the peers will not arrive, and this thread must not wait for them until the deadline.
    if (auto stopped = stopped_reason()) throw TransportStopped{*stopped};
    if (Clock::now() > deadline) throw TransportStopped{explainer_.explain_timeout(op)};
  };
  if (!fused) {
    CommFailure failure = agree(op, hash, deadline, watch);
    if (!failure.empty() || !transport) return failure;
  }
  try {
    Started started = transport->start(op.data, hash, watch);
    if (fused && op.queued_us_ >= 0) op.agreed_us_ = transport->agreed_us();
    if (!started.agreed) return explainer_.explain_desync(op);
    if (!started.work && op.queued_us_ >= 0) op.data_us_ = trace::now_us();
    op.work_ = started.work;
    op.then_ = std::move(started.then);
  } catch (const TransportStopped& stopped) {
    return stopped.message;
  } catch (const std::exception& e) {
    return explainer_.start_failure(op, *transport, e);
  }
  return {};
}

CommFailure CommImpl::agree(PendingOp& op, uint64_t hash, Clock::time_point deadline, const ShmWatch& watch) {
  if (shm_) {
    // On one host the agreement rides on the segment's barrier (shm_transport.h).
    try {
      const bool agreed = shm_->agree(hash, watch);
      if (op.queued_us_ >= 0) op.agreed_us_ = shm_->agreed_us();
      return agreed ? CommFailure{} : explainer_.explain_desync(op);
    } catch (const TransportStopped& stopped) {
      return stopped.message;
    } catch (const std::exception& e) {
      return explainer_.shm_failure(op, e);
    }
  }
  AgreeResult result;
  std::optional<PeerFailure> failure = control_->agree(uint64_t(op.seq), hash, deadline, result);
  if (op.queued_us_ >= 0) op.agreed_us_ = trace::now_us();
  if (failure) return explainer_.explain(*failure, op);
  return result.agreed() ? CommFailure{} : explainer_.explain_desync(op);
}

std::optional<CommFailure> CommImpl::stopped_reason() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!poisoned_.empty()) return poisoned_;
  if (stop_) return CommFailure("the Comm is being destroyed", ErrorKind::kAborted, {world_rank(config_.rank)});
  return std::nullopt;
}

CommFailure CommImpl::poison(const CommFailure& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (poisoned_.empty()) {
    poisoned_ = error;
    // After a stop signal the peers stop too: what fails then is the stop's consequence, said as such.
    if (const int signal = stop_signal_taken(); signal != 0) {
      poisoned_.message = "stopped by " + signal_name(signal) + " (this job was asked to stop): " + error.message;
      poisoned_.kind = ErrorKind::kAborted;
    }
    poisoned_.message = Error(poisoned_.message, poisoned_.kind, error.ranks).what();  // final, rank-prefixed
    if (control_) control_->broadcast_abort(poisoned_.message);
  }
  return poisoned_;
}

void CommImpl::fail(PendingOp& op, const CommFailure& failure) {
  const CommFailure final_failure = poison(failure);
  {
    std::lock_guard<std::mutex> lock(op.mutex_);
    op.error_ = final_failure;
    op.finished_ = true;
  }
  if (control_) control_->interrupt();
  throw final_failure.error();
}

void CommImpl::await_data(PendingOp& op) {
  std::unique_lock<std::mutex> lock(op.mutex_);
  op.cv_.wait(lock, [&] { return op.launched_; });
  if (!op.error_.empty()) {
    const CommFailure error = op.error_;
    lock.unlock();
    fail(op, error);
  }
  const auto deadline = op.started_ + config_.timeout;
  if (op.device_completion && op.work_ && op.peer < 0) {  // p2p: its waiter thread polls
    lock.unlock();
    await_device(op, deadline);
    return;
  }
  while (!op.cv_.wait_for(lock, kWatchInterval, [&] { return op.data_done_; })) {
    lock.unlock();
    // Comm::abort from another thread (a launcher that saw a rank's process end) ends the wait too.
    if (auto stopped = stopped_reason()) fail(op, *stopped);
    if (auto failure = control_->check_peers()) fail(op, explainer_.explain(*failure, op));
    if (Clock::now() > deadline) fail(op, explainer_.explain_timeout(op));
    lock.lock();
  }
}

void CommImpl::await_device(PendingOp& op, Clock::time_point deadline) {
  // Polls the CUDA event behind Work::isCompleted(): short sleeps first (most collectives end within
  // microseconds of being waited on), backing off to 1 ms; the peers and the clock every 50 ms.
  auto sleep = std::chrono::microseconds(5);
  auto next_watch = Clock::now() + kWatchInterval;
  while (!op.work_->isCompleted()) {
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    if (Clock::now() < next_watch) continue;
    next_watch = Clock::now() + kWatchInterval;
    if (auto stopped = stopped_reason()) fail(op, *stopped);
    if (auto failure = control_->check_peers()) fail(op, explainer_.explain(*failure, op));
    if (Clock::now() > deadline) fail(op, explainer_.explain_timeout(op));
  }
  std::lock_guard<std::mutex> lock(op.mutex_);
  if (op.queued_us_ >= 0) op.data_us_ = trace::now_us();
  op.data_done_ = true;
}

void CommImpl::wait(PendingOp& op) {
  {
    std::lock_guard<std::mutex> lock(op.mutex_);
    if (op.finished_) {
      if (!op.error_.empty()) throw op.error_.error();
      return;
    }
  }
  if (config_.size > 1 && op.seq >= 0) {
    await_data(op);
    if (!op.transport_error_.empty()) fail_transport(op, op.transport_error_);
    if (op.work_ && op.peer < 0) {  // a point-to-point op's waiter thread already waited on it
      try {
        op.work_->wait();
      } catch (const std::exception& e) {
        fail_transport(op, first_line(e.what()));
      }
    }
  }
  if (op.then_) op.then_();
  if (op.finish) op.finish();
  std::lock_guard<std::mutex> lock(op.mutex_);
  op.finished_ = true;
  if (op.queued_us_ >= 0 && op.peer < 0) trace_phases(op, config_.group_name);
}

void CommImpl::fail_transport(PendingOp& op, const std::string& what) {
  // The transport failed (usually a peer vanished mid-transfer): name the rank if we can.
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until) {
    if (auto failure = control_->check_peers()) fail(op, explainer_.explain(*failure, op));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  fail(op, explainer_.describe(op) + " failed in the transport: " + what);
}

void CommImpl::number_p2p(PendingOp& op, bool send) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!poisoned_.empty()) throw poisoned_.error();
  op.seq = (send ? send_seq_ : recv_seq_)[{op.peer, op.tag}]++;
  op.started_ = Clock::now();
}

void CommImpl::spawn_waiter(std::function<void()> body, bool prompt) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Reap the finished ones, so a long pipeline does not pile up threads.
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  waiters_.push_back(Waiter{std::thread([body = std::move(body), done] {
                              body();
                              done->store(true);
                            }),
                            done, prompt});
}

void CommImpl::mark_launched(PendingOp& op, const CommFailure& error) {
  std::lock_guard<std::mutex> lock(op.mutex_);
  op.error_ = error;
  op.launched_ = true;
  if (!op.work_ || !error.empty()) op.data_done_ = true;
  op.cv_.notify_all();
}

bool CommImpl::is_completed(PendingOp& op) {
  std::lock_guard<std::mutex> lock(op.mutex_);
  return op.finished_ || (op.launched_ && op.data_done_);
}

}  // namespace cohort::detail
