// The collectives between hosts over the leaders' link (see cross_host_collectives.h).
#include "comm/cross_host_collectives.h"

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "comm/shm_reduce.h"

namespace cohort::detail {
namespace {

// Undefined: nothing to move.
LinkPiece piece(int host, const at::Tensor& t) {
  if (!t.defined()) return {host, nullptr, 0};
  return {host, t.data_ptr(), size_t(t.nbytes())};
}

struct Header {
  uint64_t fingerprint = 0, bytes = 0;
  uint32_t host_agreed = 0, pad = 0;
};

// into = into op other, elementwise, with the segment's loop, which for small sums skips LibTorch's
// dispatcher (a few microseconds per call, as much as a 4 KiB allreduce's own work between hosts). The
// hierarchy's buffers and scratch rows are contiguous, of the op's dtype.
void combine(const at::Tensor& into, const at::Tensor& other, ReduceOp op) {
  reduce_parts(into.data_ptr(), {into.data_ptr(), other.data_ptr()}, into.numel(), into.scalar_type(), op);
}

// `mine` combined with the other hosts' rows of `rows` [hosts, n] (row `me` unused) in host order:
// ((row0 op row1) op row2) ..., with `mine` as row `me`. A sum or product of two values has the same
// bits in either order, so the rows before `me` are combined in row 0 and that into `mine`, which is
// never copied; min and max can differ by operand order (-0 and +0), so past host 0 `mine` takes its
// row and row 0's values first.
void combine_in_host_order(const at::Tensor& mine, const at::Tensor& rows, int me, ReduceOp op) {
  const int hosts = int(rows.size(0));
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
    if (me > 0) {
      rows[me].copy_(mine);
      mine.copy_(rows[0]);
    }
    for (int h = 1; h < hosts; ++h) combine(mine, rows[h], op);
    return;
  }
  if (me > 0) {
    const at::Tensor before = rows[0];
    for (int h = 1; h < me; ++h) combine(before, rows[h], op);
    combine(mine, before, op);
  }
  for (int h = me + 1; h < hosts; ++h) combine(mine, rows[h], op);
}

// After a host's first piece has arrived, `then` (when set) is called on each of its later
// arrivals, with the verdict so far: final once every host's first piece is in.
using Then = std::function<LinkFollowUp(int host, bool agreed)>;

// One round with every other host h's member, with agreement: sends send_of(h) to it and
// receives recv_of(h) from it, each piece behind a header; a peer whose header differs from this
// one's vote has its bytes read into a scratch buffer. True when all agree.
template <class SendOf, class RecvOf>
bool agree_with_every_host(CrossHostLink& link, HostVote vote, SendOf send_of, RecvOf recv_of, const ShmWatch& watch,
                           const Then& then = nullptr) {
  const int hosts = link.hosts();
  std::vector<Header> out(hosts), in(hosts);
  std::vector<LinkPiece> sends, recvs;
  for (int h = 0; h < hosts; ++h) {
    if (h == link.host()) continue;
    const LinkPiece data = piece(h, send_of(h));
    out[h] = Header{vote.fingerprint, data.bytes, vote.host_agreed ? 1u : 0u, 0};
    sends.push_back({h, &out[h], sizeof(Header)});
    sends.push_back(data);
    recvs.push_back({h, &in[h], sizeof(Header)});
  }
  bool agreed = vote.host_agreed;
  std::vector<bool> headed(hosts, false), matched(hosts, false);
  std::vector<std::vector<char>> dropped(hosts);
  auto next = [&](int h) -> LinkFollowUp {
    if (headed[h]) return then && matched[h] ? then(h, agreed) : LinkFollowUp{};
    headed[h] = true;
    const LinkPiece expected = piece(h, recv_of(h));
    if (in[h].fingerprint == vote.fingerprint && in[h].host_agreed == 1 && in[h].bytes == expected.bytes) {
      matched[h] = true;
      return {{expected}, {}};
    }
    agreed = false;
    dropped[h].resize(in[h].bytes);
    return {{LinkPiece{h, dropped[h].data(), dropped[h].size()}}, {}};
  };
  link.transfer(sends, recvs, watch, next);
  return agreed;
}

// Above kDirectAllreduceBytes: a reduce-scatter (block h combined by host h's member) and an allgather
// of the combined blocks, in one transfer: once every host's copy of this member's block is in, it is
// combined and goes out to every host while the transfer still runs (each link carries a block's
// bytes once each way, as in a ring, but all at once). Cutting the blocks into 128 KiB segments that
// went on one by one read 1.2-1.7x slower on 2 vCPUs, where no core is free to overlap them
// (docs/BENCHMARKS.md, "Across hosts").
bool allreduce_in_blocks(CrossHostLink& link, HostVote vote, const at::Tensor& flat, ReduceOp op,
                         const ShmWatch& watch) {
  const int hosts = link.hosts(), me = link.host();
  const int64_t n = flat.numel();
  auto block = [&](int h) { return flat.narrow(0, h * n / hosts, (h + 1) * n / hosts - h * n / hosts); };
  const at::Tensor mine = block(me);
  const at::Tensor rows = link.scratch(hosts, mine.numel(), flat.options());  // row h: host h's copy of mine
  int copies = 0;                                                             // hosts whose copy of mine arrived
  auto then = [&](int, bool agreed) {
    // Called again for each host's combined block: nothing follows it.
    LinkFollowUp follow_up;
    if (++copies != hosts - 1 || !agreed) return follow_up;  // every copy in: the verdict is final
    combine_in_host_order(mine, rows, me, op);
    for (int g = 0; g < hosts; ++g) {
      if (g == me) continue;
      follow_up.sends.push_back(piece(g, mine));
      follow_up.receives.push_back(piece(g, block(g)));
    }
    return follow_up;
  };
  return agree_with_every_host(
      link, vote, block, [&](int h) { return rows[h]; }, watch, then);
}

}  // namespace

bool cross_allreduce(CrossHostLink& link, HostVote vote, const at::Tensor& buffer, ReduceOp op, const ShmWatch& watch) {
  const int hosts = link.hosts();
  const at::Tensor flat = buffer.view(-1);
  if (size_t(buffer.nbytes()) > kDirectAllreduceBytes && flat.numel() >= hosts)
    return allreduce_in_blocks(link, vote, flat, op, watch);
  at::Tensor rows = link.scratch(hosts, flat.numel(), flat.options());
  if (!agree_with_every_host(
          link, vote, [&](int) { return flat; }, [&](int h) { return rows[h]; }, watch))
    return false;
  combine_in_host_order(flat, rows, link.host(), op);
  return true;
}

bool cross_broadcast(CrossHostLink& link, HostVote vote, const at::Tensor& buffer, int root_host,
                     const ShmWatch& watch) {
  // The root host's member sends its buffer; the others send only their header (every member votes).
  const bool root = link.host() == root_host;
  return agree_with_every_host(
      link, vote, [&](int) { return root ? buffer : at::Tensor(); },
      [&](int h) { return h == root_host ? buffer : at::Tensor(); }, watch);
}

bool cross_allgather(CrossHostLink& link, HostVote vote, const at::Tensor& blocks, const ShmWatch& watch) {
  const at::Tensor mine = blocks[link.host()];
  return agree_with_every_host(
      link, vote, [&](int) { return mine; }, [&](int h) { return blocks[h]; }, watch);
}

bool cross_reduce_parts(CrossHostLink& link, HostVote vote, const at::Tensor& parts, const at::Tensor& out, ReduceOp op,
                        const ShmWatch& watch) {
  at::Tensor rows = link.scratch(parts.size(0), parts.size(1), parts.options());
  if (!agree_with_every_host(
          link, vote, [&](int h) { return parts[h]; }, [&](int h) { return rows[h]; }, watch))
    return false;
  out.copy_(parts[link.host()]);
  combine_in_host_order(out, rows, link.host(), op);
  return true;
}

}  // namespace cohort::detail
