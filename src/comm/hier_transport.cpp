// Hierarchical collectives across hosts (see hier_transport.h). Each op runs on every rank; within a
// host its steps are the segment's collectives (whose barriers watch the control plane, so a dead
// rank anywhere ends every wait), between hosts the leaders' links, which call the same watch.
#include "comm/hier_transport.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "comm/cross_host_collectives.h"
#include "comm/transports.h"
#include "core/log.h"
#include "core/trace_recorder.h"

namespace cohort::detail {
namespace {

std::vector<uint8_t> bytes_of(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }
std::string text_of(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

// Rank 0 collects each rank's "1"/"0" under `key` + rank (only `voters` vote) and publishes whether all
// said yes; every rank returns that verdict.
bool all_say_yes(c10d::Store& store, const std::string& key, int rank, bool yes, const std::vector<int>& voters) {
  if (rank != 0) {
    if (std::find(voters.begin(), voters.end(), rank) != voters.end())
      store.set(key + std::to_string(rank), bytes_of(yes ? "1" : "0"));
    return text_of(store.get(key + "verdict")) == "1";
  }
  bool all = yes;
  for (int r : voters)
    if (r != 0) all &= text_of(store.get(key + std::to_string(r))) == "1";
  store.set(key + "verdict", bytes_of(all ? "1" : "0"));
  return all;
}

}  // namespace

HostLayout HostLayout::of(const std::vector<std::string>& host_of_rank) {
  const int size = int(host_of_rank.size());
  int per_host = 1;
  while (per_host < size && host_of_rank[per_host] == host_of_rank[0]) ++per_host;
  if (size % per_host != 0) return {};
  for (int first = 0; first < size; first += per_host) {
    // A block of per_host consecutive ranks on one host, no host in two blocks.
    for (int r = first; r < first + per_host; ++r)
      if (host_of_rank[r] != host_of_rank[first]) return {};
    for (int earlier = 0; earlier < first; earlier += per_host)
      if (host_of_rank[earlier] == host_of_rank[first]) return {};
  }
  return HostLayout{size / per_host, per_host};
}

std::unique_ptr<HierTransport> HierTransport::negotiate(HierConfig config) {
  const HostLayout layout = config.layout;
  c10d::Store& store = *config.store;
  const std::string key = config.prefix + "/hier/";
  std::vector<int> everyone(config.size), leaders(layout.hosts);
  for (int r = 0; r < config.size; ++r) everyone[r] = r;
  for (int h = 0; h < layout.hosts; ++h) leaders[h] = h * layout.per_host;
  if (!all_say_yes(store, key + "on", config.rank, config.enabled, everyone)) {
    if (config.rank == 0)
      COHORT_INFO(
          "hierarchical collectives off (COHORT_HIERARCHICAL=0 or COHORT_SHM=0 on some rank): CPU "
          "collectives across the ",
          layout.hosts, " hosts use flat Gloo");
    return nullptr;
  }
  const int host = config.rank / layout.per_host;
  // One rank per host: no segment, the link alone (Gloo's ring took 1-2 ms for 4 KiB between two hosts).
  std::unique_ptr<ShmTransport> local;
  if (layout.per_host > 1)
    local = ShmTransport::negotiate(store, config.prefix + "/host" + std::to_string(host),
                                    config.rank % layout.per_host, layout.per_host, true, config.slot_bytes);
  // A host's ranks share their segment's verdict: its leader votes for it.
  if (layout.per_host > 1 && !all_say_yes(store, key + "segments", config.rank, bool(local), leaders)) {
    if (config.rank == 0)
      COHORT_INFO(
          "hierarchical collectives not used: a host could not make its shared-memory segment; CPU "
          "collectives across the ",
          layout.hosts, " hosts use flat Gloo");
    return nullptr;
  }
  if (config.rank == 0 && layout.per_host > 1)
    COHORT_INFO("hierarchical collectives: ", layout.hosts, " hosts x ", layout.per_host,
                " ranks, shared "
                "memory within each host, TCP among one leader per host (COHORT_HIERARCHICAL=0: flat Gloo)");
  if (config.rank == 0 && layout.per_host == 1)
    COHORT_INFO("collectives across the ", layout.hosts,
                " hosts (one rank each): cohort's TCP links between the hosts (COHORT_HIERARCHICAL=0: flat Gloo)");
  return std::unique_ptr<HierTransport>(new HierTransport(config, std::move(local)));
}

HierTransport::HierTransport(const HierConfig& config, std::unique_ptr<ShmTransport> local)
    : layout_(config.layout),
      rank_(config.rank),
      size_(config.size),
      host_(config.rank / config.layout.per_host),
      local_(std::move(local)) {
  if (!leader()) return;  // only the leaders move data between hosts
  CrossHostLinkConfig link = config.link;
  link.prefix = config.prefix + "/leaders";
  link.host = host_;
  link.hosts = layout_.hosts;
  link.rank_of_host.clear();
  for (int h = 0; h < layout_.hosts; ++h) link.rank_of_host.push_back(h * layout_.per_host);
  link_ = std::make_unique<CrossHostLink>(*config.store, link);
}

bool HierTransport::can_run(const OpData& op) const { return ShmCollectives::segment_runs(op); }

Started HierTransport::start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) {
  Started started;
  // Alone on its host a rank has no barrier to time: its agreement rides on the link's first headers.
  if (alone_on_host() && trace::enabled()) agreed_us_ = trace::now_us();
  switch (op.kind) {
    case OpKind::kAllreduce: started.agreed = allreduce(op.buffer, op.reduce, fingerprint, watch); break;
    case OpKind::kBroadcast: started.agreed = broadcast(op.buffer, op.root, fingerprint, watch); break;
    case OpKind::kAllgather: started.agreed = allgather(op.output, op.buffer, fingerprint, watch); break;
    case OpKind::kReduceScatter:
      started.agreed = reduce_scatter(op.output, op.buffer, op.reduce, fingerprint, watch);
      break;
    default: break;
  }
  if (started.agreed) ++ops_done_;
  return started;
}

// Every op: a local step whose barrier agrees within the host, then the leaders' step between hosts,
// whatever their hosts' verdicts (each tells the others its own), then the leader's result and verdict
// through the segment: a leader whose leaders disagreed broadcasts under another fingerprint, so its
// host's ranks see the desync too and nothing moves. A rank that is not its host's leader waits in
// that last barrier: its leader's verdict is its host's.
bool HierTransport::finish_on_host(const at::Tensor& buffer, bool agreed, uint64_t fingerprint, const ShmWatch& watch) {
  if (alone_on_host()) return agreed;
  agreed_us_ = local_->agreed_us();  // the local step's barrier, before the next overwrites it
  return local_->broadcast(buffer, 0, agreed ? fingerprint : fingerprint ^ kLeadersDisagreed, watch);
}

bool HierTransport::allreduce(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const ShmWatch& watch) {
  // The leader alone takes its host's sum; the others get the result from its broadcast. kAvg: a sum here.
  const bool leader_reduces = size_t(buffer.nbytes()) >= kLeaderReducesBytes;
  const bool here = alone_on_host() || (leader_reduces ? local_->reduce_to_first(buffer, op, fingerprint, watch)
                                                       : local_->allreduce(buffer, op, fingerprint, watch, 0));
  const HostVote vote{fingerprint, here};
  bool agreed = here;
  if (leader()) agreed = cross_allreduce(*link_, vote, buffer.view(-1), op, watch);
  if (!here || !finish_on_host(buffer, agreed, fingerprint, watch)) return false;
  if (op == ReduceOp::kAvg) buffer.div_(size_);
  return true;
}

bool HierTransport::broadcast(const at::Tensor& buffer, int root, uint64_t fingerprint, const ShmWatch& watch) {
  const int root_host = root / layout_.per_host, root_local = root % layout_.per_host;
  // On the root's host the leader takes the data first when the root is another rank.
  const bool via_leader = host_ == root_host && root_local != 0;
  const bool here = alone_on_host() || (via_leader ? local_->broadcast(buffer, root_local, fingerprint, watch)
                                                   : local_->agree(fingerprint, watch));
  bool agreed = here;
  if (leader()) agreed = cross_broadcast(*link_, {fingerprint, here}, buffer, root_host, watch);
  if (!here) return false;
  if (!via_leader) return finish_on_host(buffer, agreed, fingerprint, watch);
  // The root's host has the data already: only the verdict goes round.
  agreed_us_ = local_->agreed_us();
  return local_->agree(agreed ? fingerprint : fingerprint ^ kLeadersDisagreed, watch);
}

bool HierTransport::allgather(const at::Tensor& output, const at::Tensor& input, uint64_t fingerprint,
                              const ShmWatch& watch) {
  // The output in host blocks: block h holds the inputs of host h's ranks, consecutive in rank order.
  at::Tensor blocks = output.view(-1).view({layout_.hosts, -1});
  const bool here = alone_on_host() ? (blocks[host_].copy_(input.view(-1)), true)
                                    : local_->allgather(blocks[host_], input, fingerprint, watch);
  bool agreed = here;
  if (leader()) agreed = cross_allgather(*link_, {fingerprint, here}, blocks, watch);
  return here && finish_on_host(output.view(-1), agreed, fingerprint, watch);
}

bool HierTransport::reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, uint64_t fingerprint,
                                   const ShmWatch& watch) {
  // The host's reduction of the whole input, then the leaders exchange parts (part j: the blocks of
  // host j's ranks) and reduce what they received, host by host in host order.
  at::Tensor sums = sums_.get(input.numel(), input.options());
  sums.copy_(input.view(-1));
  const bool here = alone_on_host() || local_->allreduce(sums, op, fingerprint, watch, 0);  // the leader's
  at::Tensor part = sums.view({layout_.hosts, -1})[host_];
  bool agreed = here;
  if (leader())
    agreed = cross_reduce_parts(*link_, {fingerprint, here}, sums.view({layout_.hosts, -1}), part, op, watch);
  if (!here || !finish_on_host(part, agreed, fingerprint, watch)) return false;
  output.copy_(part.view({layout_.per_host, -1})[rank_ % layout_.per_host]);
  if (op == ReduceOp::kAvg) output.div_(size_);
  return true;
}

}  // namespace cohort::detail
