// Point to point between ranks on one host, through the shared-memory segment's rings (p2p_shm.h).
#include "comm/p2p_shm.h"

#include <ATen/ATen.h>

#include "comm/comm_impl.h"
#include "comm/op_util.h"

namespace cohort::detail {

ShmWatch ShmPointToPoint::watch(const std::shared_ptr<PendingOp>& op) {
  return [this, op] {
    if (auto failure = comm_.control().check_peers()) throw TransportStopped{comm_.explainer().explain(*failure, *op)};
    if (auto stopped = comm_.stopped_reason()) throw TransportStopped{*stopped};
    if (Clock::now() > op->started_ + comm_.timeout())
      throw TransportStopped{comm_.explainer().explain_p2p_timeout(*op)};
  };
}

std::shared_ptr<PendingOp> ShmPointToPoint::post_send(std::shared_ptr<PendingOp> op) {
  op->comm_ = &comm_;
  comm_.number_p2p(*op, /*send=*/true);
  op->transport_ = "shm";
  const ShmMailbox::Envelope envelope{uint64_t(op->tag), uint64_t(op->seq), op->fingerprint.hash(uint64_t(op->seq)),
                                      int32_t(op->fingerprint.dtype), op->fingerprint.shape};
  const at::Tensor& buffer = op->data.buffer;
  uint64_t ticket = 0;
  if (comm_.mailbox()->try_send(op->peer, envelope, buffer.data_ptr(), buffer.nbytes(), ticket)) {
    comm_.mark_launched(*op, {});
    return op;
  }
  auto body = [this, op, envelope, ticket] {
    CommFailure error;
    try {
      comm_.mailbox()->finish_send(op->peer, ticket, envelope, op->data.buffer.data_ptr(), op->data.buffer.nbytes(),
                                   watch(op));
    } catch (const TransportStopped& stopped) {
      error = comm_.poison(stopped.message);
    } catch (const std::exception& e) {
      error = comm_.poison(comm_.explainer().shm_failure(*op, e));
    }
    comm_.mark_launched(*op, error);
  };
  if (op->caller_waits) body();
  else comm_.spawn_waiter(body, /*prompt=*/true);
  return op;
}

namespace {

// The sender's "dtype [shape]", as the receiver's own tensor is described.
std::string described(const ShmMailbox::Envelope& envelope) {
  Fingerprint sent;
  sent.dtype = c10::ScalarType(envelope.dtype);
  sent.shape = envelope.shape;
  return sent.tensor_text();
}

}  // namespace

std::shared_ptr<PendingOp> ShmPointToPoint::post_recv(std::shared_ptr<PendingOp> op) {
  op->comm_ = &comm_;
  comm_.number_p2p(*op, /*send=*/false);
  op->transport_ = "shm";
  auto receive = std::make_shared<ShmMailbox::Receive>();
  receive->tag = uint64_t(op->tag);
  receive->seq = uint64_t(op->seq);
  receive->hash = op->fingerprint.hash(uint64_t(op->seq));
  receive->destination = op->data.buffer.data_ptr();
  receive->n = op->data.buffer.nbytes();
  auto conclude = [this, op, receive](CommFailure error) {
    if (error.empty() && receive->mismatch)  // the texts only then: a receive costs microseconds
      error = comm_.explainer().explain_p2p_mismatch(*op, receive->mismatch->seq, described(*receive->mismatch));
    if (!error.empty()) error = comm_.poison(error);
    comm_.mark_launched(*op, error);
  };
  auto body = [this, op, receive, conclude] {
    CommFailure error;
    try {
      const ShmWatch stop_if = watch(op);
      comm_.mailbox()->receive(op->peer, *receive, [&] {
        if (receive->envelope_seen) {  // the timeout message then says "sent it but ..."
          std::lock_guard<std::mutex> lock(op->mutex_);
          op->notice_ = true;
        }
        stop_if();
      });
    } catch (const TransportStopped& stopped) {
      error = stopped.message;
    } catch (const std::exception& e) {
      error = comm_.explainer().shm_failure(*op, e);
    }
    conclude(error);
  };
  bool done = false;
  try {
    done = comm_.mailbox()->try_receive(op->peer, *receive);
  } catch (const std::exception& e) {
    conclude(comm_.explainer().shm_failure(*op, e));
    return op;
  }
  if (done) conclude({});
  else if (op->caller_waits) body();
  else comm_.spawn_waiter(body, /*prompt=*/true);
  return op;
}

}  // namespace cohort::detail
