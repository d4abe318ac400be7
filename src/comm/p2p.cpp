// Point-to-point messages: isend/irecv (and send/recv, send_object/recv_object on top of them), and
// their path through the control plane and c10d (p2p.h; the shared-memory one is p2p_shm.h).
#include "comm/p2p.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "cohort/comm.h"
#include "comm/comm_impl.h"
#include "comm/op_util.h"
#include "core/check.h"

namespace cohort {
namespace detail {
namespace {

// Each message's own c10d tag: its channel and number mixed (unique among messages in flight).
int gloo_tag(int tag, int64_t seq) { return int((uint64_t(uint32_t(tag)) * 2654435761u + uint64_t(seq)) & INT_MAX); }

}  // namespace

void PointToPoint::wait_transport(PendingOp& op) {
  std::string error;
  try {
    op.work_->wait();
    // NCCL's wait() only orders the caller's stream after the transfer: the host waits on the GPU here.
    auto sleep = std::chrono::microseconds(5);
    while (op.device_completion && !op.work_->isCompleted()) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  } catch (const std::exception& e) {
    error = first_line(e.what());
  }
  std::lock_guard<std::mutex> lock(op.mutex_);
  op.transport_error_ = error;
  op.data_done_ = true;
  op.cv_.notify_all();
}

std::shared_ptr<PendingOp> PointToPoint::post_send(std::shared_ptr<PendingOp> op) {
  op->comm_ = &comm_;
  comm_.number_p2p(*op, /*send=*/true);
  comm_.control().send_p2p(op->peer, uint64_t(op->tag),
                           {uint64_t(op->seq), op->fingerprint.hash(uint64_t(op->seq)), op->fingerprint.tensor_text()});
  CommFailure error;
  try {
    if (op->transport) {
      op->data.p2p_tag = gloo_tag(op->tag, op->seq);
      op->work_ = op->transport->start(op->data, 0, nullptr).work;
    }
  } catch (const std::exception& e) {
    error = comm_.poison(
        failure_from(comm_.explainer().describe(*op) + " could not start: " + first_line(e.what()), e));
  }
  comm_.mark_launched(*op, error);
  if (op->work_ && error.empty()) {
    auto body = [this, op] { wait_transport(*op); };
    if (op->inline_p2p) body();
    else comm_.spawn_waiter(body);
  }
  return op;
}

std::shared_ptr<PendingOp> PointToPoint::post_recv(std::shared_ptr<PendingOp> op) {
  op->comm_ = &comm_;
  comm_.number_p2p(*op, /*send=*/false);
  auto body = [this, op] {
    CommFailure error;
    try {
      ControlPlane::P2PNotice notice;
      const auto deadline = op->started_ + comm_.timeout();
      const ControlPlane::P2PKey key{op->peer, uint64_t(op->tag), uint64_t(op->seq)};
      if (auto failure = comm_.control().receive_p2p(key, deadline, notice)) {
        error = comm_.explainer().explain(*failure, *op);
      } else {
        {
          std::lock_guard<std::mutex> lock(op->mutex_);
          op->notice_ = true;
        }
        if (notice.hash != op->fingerprint.hash(uint64_t(op->seq)))
          error = comm_.explainer().explain_p2p_mismatch(*op, notice.seq, notice.described);
        else if (op->transport) {
          op->data.p2p_tag = gloo_tag(op->tag, op->seq);
          op->work_ = op->transport->start(op->data, 0, nullptr).work;
        }
      }
    } catch (const std::exception& e) {
      error = failure_from(comm_.explainer().describe(*op) + " could not start: " + first_line(e.what()), e);
    }
    if (!error.empty()) error = comm_.poison(error);
    comm_.mark_launched(*op, error);
    if (op->work_ && error.empty()) wait_transport(*op);
  };
  if (op->inline_p2p) body();
  else comm_.spawn_waiter(body);
  return op;
}

}  // namespace detail

namespace {

void check_peer(const Comm& comm, const torch::Tensor& tensor, int peer, int tag, const char* what) {
  COHORT_CHECK_KIND(kInvalidArgument, tensor.defined(), what, ": the tensor is undefined");
  COHORT_CHECK_KIND(kInvalidArgument, peer >= 0 && peer < comm.size() && peer != comm.rank(), what, ": peer ", peer,
                    " is not another rank of this Comm of ", comm.size(), " (this is rank ", comm.rank(), ")");
  COHORT_CHECK_KIND(kInvalidArgument, tag >= 0, what, ": tag ", tag, " is negative (accepted: 0..", INT_MAX, ")");
}

}  // namespace

namespace {

// The bytes of a CPU message between ranks on one host go through the shared-memory rings; all else
// (CUDA tensors, ranks on several hosts, COHORT_SHM=0) through the process group.
bool on_shm(detail::CommImpl& impl, const torch::Tensor& buffer) { return impl.mailbox() && buffer.is_cpu(); }

Work post_send(detail::CommImpl* impl, const torch::Tensor& tensor, int dst, int tag, bool caller_waits) {
  auto pending = detail::make_op(detail::OpKind::kSend, tensor, ReduceOp::kSum, dst);
  pending->peer = dst;
  pending->tag = tag;
  pending->inline_p2p = tensor.is_cuda();
  pending->caller_waits = caller_waits;
  torch::Tensor buf = detail::transport_view(tensor.contiguous());
  pending->data.buffer = buf;
  pending->data.peer = dst;
  if (on_shm(*impl, buf)) return Work(impl->shm_p2p().post_send(pending));
  if (buf.numel() > 0) pending->transport = impl->transport_for(pending->data);
  return Work(impl->p2p().post_send(pending));
}

Work post_recv(detail::CommImpl* impl, torch::Tensor tensor, int src, int tag, bool caller_waits) {
  auto pending = detail::make_op(detail::OpKind::kRecv, tensor, ReduceOp::kSum, src);
  pending->peer = src;
  pending->tag = tag;
  pending->inline_p2p = tensor.is_cuda();
  pending->caller_waits = caller_waits;
  torch::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
  pending->finish = [tensor, buf]() mutable {
    if (!buf.is_same(tensor)) tensor.copy_(buf);
  };
  pending->data.buffer = buf;
  pending->data.peer = src;
  if (on_shm(*impl, buf)) return Work(impl->shm_p2p().post_recv(pending));
  if (buf.numel() > 0) pending->transport = impl->transport_for(pending->data);
  return Work(impl->p2p().post_recv(pending));
}

}  // namespace

Work Comm::isend(torch::Tensor tensor, int dst, int tag) {
  check_peer(*this, tensor, dst, tag, "isend");
  return post_send(impl_.get(), tensor, dst, tag, false);
}

Work Comm::irecv(torch::Tensor tensor, int src, int tag) {
  check_peer(*this, tensor, src, tag, "irecv");
  return post_recv(impl_.get(), tensor, src, tag, false);
}

void Comm::send(const torch::Tensor& tensor, int dst, int tag) {
  check_peer(*this, tensor, dst, tag, "send");
  post_send(impl_.get(), tensor, dst, tag, true).wait();
}

void Comm::recv(torch::Tensor tensor, int src, int tag) {
  check_peer(*this, tensor, src, tag, "recv");
  post_recv(impl_.get(), tensor, src, tag, true).wait();
}

// An object travels as its length (int64 [1]) and then its bytes: int64 for a vector, uint8 for a
// string, so a string sent where a vector is expected is a dtype mismatch, named like any other.
void Comm::send_object(const std::vector<int64_t>& values, int dst, int tag) {
  send(torch::tensor({int64_t(values.size())}, torch::kLong), dst, tag);
  if (!values.empty()) send(torch::tensor(values, torch::kLong), dst, tag);
}

void Comm::send_object(const std::string& text, int dst, int tag) {
  send(torch::tensor({int64_t(text.size())}, torch::kLong), dst, tag);
  if (!text.empty())
    send(torch::from_blob(const_cast<char*>(text.data()), {int64_t(text.size())}, torch::kByte), dst, tag);
}

namespace {

int64_t recv_length(Comm& comm, int src, int tag) {
  torch::Tensor length = torch::empty({1}, torch::kLong);
  comm.recv(length, src, tag);
  return length.item<int64_t>();
}

}  // namespace

template <>
std::vector<int64_t> Comm::recv_object<std::vector<int64_t>>(int src, int tag) {
  const int64_t n = recv_length(*this, src, tag);
  torch::Tensor values = torch::empty({n}, torch::kLong);
  if (n > 0) recv(values, src, tag);
  return std::vector<int64_t>(values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + n);
}

template <>
std::string Comm::recv_object<std::string>(int src, int tag) {
  const int64_t n = recv_length(*this, src, tag);
  torch::Tensor bytes = torch::empty({n}, torch::kByte);
  if (n > 0) recv(bytes, src, tag);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), size_t(n));
}

}  // namespace cohort
