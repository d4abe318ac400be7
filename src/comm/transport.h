// The one interface every data path of Comm implements (docs/design/transports.md): shared memory on
// one host, c10d Gloo and NCCL, and hierarchical across hosts. A plan (collective_plans.cpp) describes
// a collective as plain data (OpData); CommImpl asks its transports, in order of preference, which can
// run it (Horovod's Enabled/Execute), agrees on the op with every rank and starts it on the chosen one.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

#include "cohort/comm.h"
#include "comm/fingerprint.h"
#include "comm/shm_wait.h"

namespace cohort::detail {

/// What a collective or message moves: plain data, no behaviour.
struct OpData {
  OpKind kind = OpKind::kBarrier;
  ReduceOp reduce = ReduceOp::kSum;
  int root = -1;      // broadcast
  at::Tensor buffer;  // in place for allreduce, broadcast, send, recv; the input of the others
  at::Tensor output;  // allgather (size x buffer), reduce_scatter (this rank's block), alltoall
  std::vector<int64_t> output_splits, input_splits;  // alltoall; empty for even splits
  int peer = -1;                                     // send / recv: the other rank
  int p2p_tag = 0;                                   // send / recv: the transport's tag of this message
};

/// What starting an op gave: done (a blocking transport), still moving (`work`), or a desync.
struct Started {
  /// False when a transport that agrees by itself (agrees()) found the ranks' fingerprints differ;
  /// no peer's data was read then.
  bool agreed = true;
  /// The data still moving (c10d); null when it already arrived.
  c10::intrusive_ptr<c10d::Work> work;
  /// Runs on the waiting thread once `work` completed (a local reduction, avg's division).
  std::function<void()> then;
};

/// Every transport completes the op it ran: reduce_scatter's block of the reduction in `output`,
/// allreduce's in `buffer`, with kAvg divided by the ranks' count.
class Transport {
 public:
  virtual ~Transport() = default;
  /// "shm", "gloo", "nccl", "hier": the timeline's transport of an op.
  virtual const char* name() const = 0;
  /// Whether this transport moves `op` (dtype, device, kind). Must depend only on what every rank
  /// agrees on, never on one rank's layout, so every rank picks the same transport.
  virtual bool can_run(const OpData& op) const = 0;
  /// True when start() agrees on the fingerprint itself (the segment's barrier): the Comm then skips
  /// its own agreement and start() returns agreed=false on a desync.
  virtual bool agrees() const { return false; }
  /// When the last start() of an agreeing transport found every rank agreed (trace microseconds; -1
  /// when tracing is off): the timeline's end of "agreement".
  virtual int64_t agreed_us() const { return -1; }
  /// Moves (blocking, watching the peers through `watch`, which throws TransportStopped) or starts the
  /// data. `fingerprint`: the op's agreed hash.
  virtual Started start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) = 0;
};

}  // namespace cohort::detail
