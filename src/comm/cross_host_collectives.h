// The leaders' step of the hierarchical collectives (hier_transport.h), over the leaders' own link
// (cross_host_link.h): every reduction combines the hosts' values in host order, so every leader, rank
// and run gets the same bits. Allreduce: up to kDirectAllreduceBytes every leader sends its whole
// buffer to every other and each combines all of them (one round); above, a reduce-scatter (host h's
// leader combines block h from every host) then an allgather of the blocks (two rounds, each leader
// sending (hosts - 1) / hosts of the buffer in each, as a ring would, but all at once).
// Agreement rides on the first round: each leader sends every other a header (the op's fingerprint,
// whether its host's ranks agreed, how many bytes follow) before its data, so a disagreeing leader's
// bytes are read and dropped, never awaited; every leader gets the same verdict, returned (false: a
// desync somewhere, nothing combined).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

#include "cohort/comm.h"
#include "comm/cross_host_link.h"

namespace cohort::detail {

constexpr size_t kDirectAllreduceBytes = size_t(256) << 10;

/// What every leader must agree on: the op's fingerprint, and whether its host's ranks agreed.
struct HostVote {
  uint64_t fingerprint = 0;
  bool host_agreed = true;
};

/// Only the headers: how a rank whose stripe moves no data in this op still tells its counterparts
/// its vote, so one that runs another collective is not left waiting for it.
bool cross_agree(CrossHostLink& link, HostVote vote, const ShmWatch& watch);
/// `buffer` combined over the leaders by `op` (kAvg: a sum, the caller divides); contiguous CPU.
bool cross_allreduce(CrossHostLink& mesh, HostVote vote, const at::Tensor& buffer, ReduceOp op, const ShmWatch& watch);
/// Host `root_host`'s leader's `buffer` on every leader.
bool cross_broadcast(CrossHostLink& mesh, HostVote vote, const at::Tensor& buffer, int root_host,
                     const ShmWatch& watch);
/// `blocks` [hosts, ...]: this leader's row in, every row out.
bool cross_allgather(CrossHostLink& mesh, HostVote vote, const at::Tensor& blocks, const ShmWatch& watch);
/// `parts` [hosts, ...]: row h goes to host h's leader; `out` = this host's row of every leader,
/// combined by `op` in host order.
bool cross_reduce_parts(CrossHostLink& mesh, HostVote vote, const at::Tensor& parts, const at::Tensor& out, ReduceOp op,
                        const ShmWatch& watch);

}  // namespace cohort::detail
