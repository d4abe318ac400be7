// Point to point between ranks on one host, through the shared-memory segment's rings (ShmMailbox)
// instead of a control-plane notice plus Gloo: the envelope carries what the notice did (number on the
// channel, fingerprint hash, the sender's dtype and shape), so a mismatch is still named before any byte
// lands, and a small message costs two memcpys instead of two socket round trips and a thread.
#include <ATen/ATen.h>

#include "comm/comm_impl.h"
#include "comm/op_util.h"

namespace cohort::detail {

ShmWatch CommImpl::p2p_watch(const std::shared_ptr<PendingOp>& op) {
  return [this, op] {
    if (auto failure = control_->check_peers()) throw TransportStopped{explain(*failure, *op)};
    if (auto stopped = stopped_reason()) throw TransportStopped{*stopped};
    if (Clock::now() > op->started_ + config_.timeout) throw TransportStopped{explain_p2p_timeout(*op)};
  };
}

std::shared_ptr<PendingOp> CommImpl::post_shm_send(std::shared_ptr<PendingOp> op) {
  op->comm_ = this;
  number_p2p(*op, send_seq_);
  op->transport_ = "shm";
  const ShmMailbox::Envelope envelope{uint64_t(op->tag), uint64_t(op->seq), op->fingerprint.hash(uint64_t(op->seq)),
                                      int32_t(op->fingerprint.dtype), op->fingerprint.shape};
  const at::Tensor& buffer = op->data.buffer;
  uint64_t ticket = 0;
  if (mailbox_->try_send(op->peer, envelope, buffer.data_ptr(), buffer.nbytes(), ticket)) {
    mark_launched(*op, {});
    return op;
  }
  auto body = [this, op, envelope, ticket] {
    CommFailure error;
    try {
      mailbox_->finish_send(op->peer, ticket, envelope, op->data.buffer.data_ptr(), op->data.buffer.nbytes(),
                            p2p_watch(op));
    } catch (const TransportStopped& stopped) {
      error = poison(stopped.message);
    } catch (const std::exception& e) {
      error = poison(shm_failure(*op, e));
    }
    mark_launched(*op, error);
  };
  if (op->caller_waits) body();
  else spawn_waiter(body, /*prompt=*/true);
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

std::shared_ptr<PendingOp> CommImpl::post_shm_recv(std::shared_ptr<PendingOp> op) {
  op->comm_ = this;
  number_p2p(*op, recv_seq_);
  op->transport_ = "shm";
  auto receive = std::make_shared<ShmMailbox::Receive>();
  receive->tag = uint64_t(op->tag);
  receive->seq = uint64_t(op->seq);
  receive->hash = op->fingerprint.hash(uint64_t(op->seq));
  receive->destination = op->data.buffer.data_ptr();
  receive->n = op->data.buffer.nbytes();
  auto conclude = [this, op, receive](CommFailure error) {
    if (error.empty() && receive->mismatch)  // the texts only then: a receive costs microseconds
      error = explain_p2p_mismatch(*op, receive->mismatch->seq, described(*receive->mismatch));
    if (!error.empty()) error = poison(error);
    mark_launched(*op, error);
  };
  auto body = [this, op, receive, conclude] {
    CommFailure error;
    try {
      const ShmWatch watch = p2p_watch(op);
      mailbox_->receive(op->peer, *receive, [&] {
        if (receive->envelope_seen) {  // the timeout message then says "sent it but ..."
          std::lock_guard<std::mutex> lock(op->mutex_);
          op->notice_ = true;
        }
        watch();
      });
    } catch (const TransportStopped& stopped) {
      error = stopped.message;
    } catch (const std::exception& e) {
      error = shm_failure(*op, e);
    }
    conclude(error);
  };
  bool done = false;
  try {
    done = mailbox_->try_receive(op->peer, *receive);
  } catch (const std::exception& e) {
    conclude(shm_failure(*op, e));
    return op;
  }
  if (done) conclude({});
  else if (op->caller_waits) body();
  else spawn_waiter(body, /*prompt=*/true);
  return op;
}

}  // namespace cohort::detail
