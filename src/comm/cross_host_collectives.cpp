// The collectives between hosts over a stripe (see cross_host_collectives.h).
#include "comm/cross_host_collectives.h"

#include <ATen/ATen.h>

#include <cstring>
#include <vector>

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

// `rows` [hosts, n] combined into `out` [n] in host order: ((row0 op row1) op row2) ...
void fold_rows(const at::Tensor& rows, const at::Tensor& out, ReduceOp op) {
  out.copy_(rows[0]);
  for (int64_t h = 1; h < rows.size(0); ++h) {
    const at::Tensor row = rows[h];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: out.add_(row); break;
      case ReduceOp::kProduct: out.mul_(row); break;
      case ReduceOp::kMin: at::minimum_out(const_cast<at::Tensor&>(out), out, row); break;
      case ReduceOp::kMax: at::maximum_out(const_cast<at::Tensor&>(out), out, row); break;
    }
  }
}

// One round with every other host h's member of the stripe: sends send_of(h) to it and receives recv_of(h) from it.
template <class SendOf, class RecvOf>
void with_every_host(CrossHostLink& link, SendOf send_of, RecvOf recv_of, const ShmWatch& watch) {
  std::vector<LinkPiece> sends, recvs;
  for (int h = 0; h < link.hosts(); ++h) {
    if (h == link.host()) continue;
    sends.push_back(piece(h, send_of(h)));
    recvs.push_back(piece(h, recv_of(h)));
  }
  link.transfer(sends, recvs, watch);
}

// with_every_host's first round, with agreement: each piece behind a header; a peer whose header
// differs from this one's vote has its bytes read into a scratch buffer. True when all agree.
template <class SendOf, class RecvOf>
bool agree_with_every_host(CrossHostLink& link, HostVote vote, SendOf send_of, RecvOf recv_of, const ShmWatch& watch) {
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
  std::vector<bool> headed(hosts, false);
  std::vector<std::vector<char>> dropped(hosts);
  auto next = [&](int h) -> std::optional<LinkPiece> {
    if (headed[h]) return std::nullopt;  // the data has arrived too
    headed[h] = true;
    const LinkPiece expected = piece(h, recv_of(h));
    if (in[h].fingerprint == vote.fingerprint && in[h].host_agreed == 1 && in[h].bytes == expected.bytes)
      return expected;
    agreed = false;
    dropped[h].resize(in[h].bytes);
    return LinkPiece{h, dropped[h].data(), dropped[h].size()};
  };
  link.transfer(sends, recvs, watch, next);
  return agreed;
}

}  // namespace

bool cross_agree(CrossHostLink& link, HostVote vote, const ShmWatch& watch) {
  auto nothing = [](int) { return at::Tensor(); };
  return agree_with_every_host(link, vote, nothing, nothing, watch);
}

bool cross_allreduce(CrossHostLink& link, HostVote vote, const at::Tensor& buffer, ReduceOp op, const ShmWatch& watch) {
  const int hosts = link.hosts(), me = link.host();
  const at::Tensor flat = buffer.view(-1);
  const int64_t n = flat.numel();
  if (size_t(buffer.nbytes()) <= kDirectAllreduceBytes || n < hosts) {
    at::Tensor rows = link.scratch(hosts, n, flat.options());
    rows[me].copy_(flat);
    if (!agree_with_every_host(
            link, vote, [&](int) { return flat; }, [&](int h) { return rows[h]; }, watch))
      return false;
    fold_rows(rows, flat, op);
    return true;
  }
  // Block h (elements [h * n / hosts, (h + 1) * n / hosts)) is combined by host h's member.
  auto block = [&](int h) { return flat.narrow(0, h * n / hosts, (h + 1) * n / hosts - h * n / hosts); };
  const at::Tensor mine = block(me);
  at::Tensor rows = link.scratch(hosts, mine.numel(), flat.options());
  rows[me].copy_(mine);
  if (!agree_with_every_host(
          link, vote, block, [&](int h) { return rows[h]; }, watch))
    return false;
  fold_rows(rows, mine, op);
  with_every_host(
      link, [&](int) { return mine; }, block, watch);
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
  rows[link.host()].copy_(parts[link.host()]);
  if (!agree_with_every_host(
          link, vote, [&](int h) { return parts[h]; }, [&](int h) { return rows[h]; }, watch))
    return false;
  fold_rows(rows, out, op);
  return true;
}

}  // namespace cohort::detail
