// Hierarchical collectives across hosts (see hier_transport.h). Each op runs on every rank; within a
// host its steps are the segment's collectives (whose barriers watch the control plane, so a dead
// rank anywhere ends every wait), between hosts the leaders' Gloo group, polled with the same watch.
#include "comm/hier_transport.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/op_util.h"
#include "comm/transports.h"
#include "core/log.h"

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
  auto local = ShmTransport::negotiate(store, config.prefix + "/host" + std::to_string(host),
                                       config.rank % layout.per_host, layout.per_host, true, config.slot_bytes);
  // A host's ranks share their segment's verdict: its leader votes for it.
  if (!all_say_yes(store, key + "segments", config.rank, bool(local), leaders)) {
    if (config.rank == 0)
      COHORT_INFO(
          "hierarchical collectives not used: a host could not make its shared-memory segment; CPU "
          "collectives across the ",
          layout.hosts, " hosts use flat Gloo");
    return nullptr;
  }
  if (config.rank == 0)
    COHORT_INFO("hierarchical collectives: ", layout.hosts, " hosts x ", layout.per_host,
                " ranks, shared "
                "memory within each host, Gloo among one leader per host (COHORT_HIERARCHICAL=0: flat Gloo)");
  return std::unique_ptr<HierTransport>(new HierTransport(config, std::move(local)));
}

HierTransport::HierTransport(const HierConfig& config, std::unique_ptr<ShmTransport> local)
    : layout_(config.layout),
      rank_(config.rank),
      size_(config.size),
      host_(config.rank / config.layout.per_host),
      local_(std::move(local)) {
  if (!leader()) return;
  BackendConfig backend = config.leaders;
  backend.store = c10::make_intrusive<c10d::PrefixStore>(config.prefix + "/leaders", config.store);
  backend.rank = host_;
  backend.size = layout_.hosts;
  leaders_ = make_gloo(backend);
}

HierTransport::~HierTransport() {
  if (leaders_) shutdown_backend(*leaders_);
}

bool HierTransport::can_run(const OpData& op) const { return ShmCollectives::segment_runs(op); }

Started HierTransport::start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) {
  Started started;
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

void HierTransport::finish(const c10::intrusive_ptr<c10d::Work>& work, const ShmWatch& watch) {
  // Short sleeps first (a small message between hosts takes tens of microseconds), backing off to
  // 1 ms; the peers and the deadline every 5 ms.
  auto sleep = std::chrono::microseconds(2);
  auto next_watch = std::chrono::steady_clock::now();
  while (!work->isCompleted()) {
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    if (std::chrono::steady_clock::now() < next_watch) continue;
    watch();
    next_watch = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  }
  try {
    work->wait();
  } catch (const std::exception&) {
    // Usually a leader on another host vanished mid-transfer: let the control plane name it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < until) {
      watch();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw;
  }
}

bool HierTransport::allreduce(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const ShmWatch& watch) {
  if (!local_->allreduce(buffer, op, fingerprint, watch)) return false;  // kAvg: a sum here
  if (leader()) {
    std::vector<at::Tensor> tensors{buffer};
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op);
    finish(leaders_->allreduce(tensors, options), watch);
  }
  if (!local_->broadcast(buffer, 0, fingerprint, watch)) return false;
  if (op == ReduceOp::kAvg) buffer.div_(size_);
  return true;
}

bool HierTransport::broadcast(const at::Tensor& buffer, int root, uint64_t fingerprint, const ShmWatch& watch) {
  const int root_host = root / layout_.per_host, root_local = root % layout_.per_host;
  // On the root's host the leader takes the data first when the root is another rank.
  if (host_ == root_host && root_local != 0 && !local_->broadcast(buffer, root_local, fingerprint, watch)) return false;
  if (leader()) {
    std::vector<at::Tensor> tensors{transport_view(buffer)};
    c10d::BroadcastOptions options;
    options.rootRank = root_host;
    finish(leaders_->broadcast(tensors, options), watch);
  }
  if (host_ == root_host && root_local != 0) return true;
  return local_->broadcast(buffer, 0, fingerprint, watch);
}

bool HierTransport::allgather(const at::Tensor& output, const at::Tensor& input, uint64_t fingerprint,
                              const ShmWatch& watch) {
  // The output in host blocks: block h holds the inputs of host h's ranks, consecutive in rank order.
  at::Tensor blocks = output.view(-1).view({layout_.hosts, -1});
  at::Tensor mine = blocks[host_];
  if (!local_->allgather(mine, input, fingerprint, watch)) return false;
  if (leader()) {
    std::vector<std::vector<at::Tensor>> outputs(1, transport_view(blocks).unbind(0));
    std::vector<at::Tensor> inputs{transport_view(mine.clone())};
    finish(leaders_->allgather(outputs, inputs), watch);
  }
  return local_->broadcast(output.view(-1), 0, fingerprint, watch);
}

bool HierTransport::reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, uint64_t fingerprint,
                                   const ShmWatch& watch) {
  // The host's reduction of the whole input, then the leaders exchange parts (part j: the blocks of
  // host j's ranks) and reduce what they received, host by host in host order.
  at::Tensor sums = input.clone();
  if (!local_->allreduce(sums, op, fingerprint, watch)) return false;
  at::Tensor part = sums.view({layout_.hosts, -1})[host_];
  const ReduceOp combine = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (leader()) {
    at::Tensor received = at::empty_like(sums);
    std::vector<int64_t> no_splits;
    c10d::AllToAllOptions options;
    finish(leaders_->alltoall_base(received, sums, no_splits, no_splits, options), watch);
    reduce_rows(received.view({layout_.hosts, -1}), part, combine, 1);
  }
  if (!local_->broadcast(part, 0, fingerprint, watch)) return false;
  output.copy_(part.view({layout_.per_host, -1})[local_->rank()]);
  if (op == ReduceOp::kAvg) output.div_(size_);
  return true;
}

}  // namespace cohort::detail
