// The timeline's view of a collective (core/trace_recorder.h): once an op is waited for, its phases
// become events: "queued" (issued, waiting behind earlier ops), "ready" (an instant: this rank entered
// the agreement, Horovod's NEGOTIATE mark), "agreement" (the fingerprint agreement, on the control
// plane or at the shared-memory segment's first barrier: it lasts until the last rank is ready, so a
// long one means another rank was late),
// "transfer" (data moving on shm, Gloo or NCCL) and "done" (an instant: the caller's wait returned).
#include <c10/core/ScalarType.h>

#include "comm/comm_impl.h"
#include "core/trace_recorder.h"

namespace cohort::detail {
namespace {

int64_t input_bytes(const Fingerprint& fingerprint) {
  int64_t elements = 1;
  for (int64_t dimension : fingerprint.shape) {
    if (dimension < 0) return -1;  // differs between ranks (uneven alltoall): unknown here
    elements *= dimension;
  }
  return elements * int64_t(c10::elementSize(fingerprint.dtype));
}

}  // namespace

void trace_phases(const PendingOp& op, const std::string& group) {
  if (op.agreed_us_ < 0) return;  // never agreed on (a world of one, or it failed): nothing moved
  trace::Event event;
  event.name = op_kind_name(op.fingerprint.op);
  event.category = "comm";
  event.seq = op.seq;
  event.bytes = input_bytes(op.fingerprint);
  event.transport = op.transport_;
  event.group = trace::intern(group);
  event.op = trace::intern(op.fingerprint.describe());
  // Clock is the steady clock trace::now_us() reads too.
  const int64_t ready = std::chrono::duration_cast<std::chrono::microseconds>(op.started_.time_since_epoch()).count();
  const int64_t data = op.data_us_ >= 0 ? op.data_us_ : op.agreed_us_;
  const int64_t done = trace::now_us();
  const std::pair<const char*, std::pair<int64_t, int64_t>> phases[] = {{"queued", {op.queued_us_, ready}},
                                                                        {"ready", {ready, ready}},
                                                                        {"agreement", {ready, op.agreed_us_}},
                                                                        {"transfer", {op.agreed_us_, data}},
                                                                        {"done", {done, done}}};
  for (const auto& [phase, times] : phases) {
    event.phase = phase;
    event.begin_us = times.first;
    event.end_us = std::max(times.first, times.second);
    trace::record(event);
  }
}

}  // namespace cohort::detail
