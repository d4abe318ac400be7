// The step between hosts of the hierarchical collectives (hier_transport.h), run by the hosts' leaders
// (one member per host) over their link (cross_host_link.h): every reduction
// combines the hosts' values in host order, so every member, rank and run gets the same bits.
// Allreduce: up to kDirectAllreduceBytes every member sends its whole buffer to every other and each
// combines all of them; above, a reduce-scatter (host h's member combines block h from every host)
// and an allgather of the combined blocks in one transfer (each member sends (hosts - 1) / hosts of
// the buffer in each half, as a ring would, but all at once). Agreement rides
// on the first pieces: each member sends every other a header (the op's fingerprint, whether its
// host's ranks agreed, how many bytes follow) before its data, so a disagreeing member's bytes are
// read and dropped, never awaited; every member gets the same verdict, returned (false: a desync
// somewhere, nothing combined).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

#include "cohort/comm.h"
#include "comm/cross_host_link.h"

namespace cohort::detail {

constexpr size_t kDirectAllreduceBytes = size_t(256) << 10;

/// What every member must agree on: the op's fingerprint, and whether its host's ranks agreed.
struct HostVote {
  uint64_t fingerprint = 0;
  bool host_agreed = true;
};

/// `buffer` combined over the hosts by `op` (kAvg: a sum, the caller divides); contiguous CPU.
bool cross_allreduce(CrossHostLink& link, HostVote vote, const at::Tensor& buffer, ReduceOp op, const ShmWatch& watch);
/// Host `root_host`'s member's `buffer` on every member.
bool cross_broadcast(CrossHostLink& link, HostVote vote, const at::Tensor& buffer, int root_host,
                     const ShmWatch& watch);
/// `blocks` [hosts, ...]: this member's row in, every row out.
bool cross_allgather(CrossHostLink& link, HostVote vote, const at::Tensor& blocks, const ShmWatch& watch);
/// `parts` [hosts, ...]: row h goes to host h's member; `out` = this host's row of every member,
/// combined by `op` in host order.
bool cross_reduce_parts(CrossHostLink& link, HostVote vote, const at::Tensor& parts, const at::Tensor& out, ReduceOp op,
                        const ShmWatch& watch);

}  // namespace cohort::detail
