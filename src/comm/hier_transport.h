// Collectives across hosts in two levels (docs/design/transports.md): the ranks of each host reduce
// or gather through a shared-memory segment of their own, then exchange with the other hosts over
// their own TCP links (cross_host_link.h, cross_host_collectives.h): one leader per host (its first
// rank) runs the step between hosts while the others wait in the segment, and the leader's result is
// broadcast through the segment again, so the network carries each host's share once. Chosen when every
// host holds the same number of consecutive ranks (one each: the links alone, no segment);
// COHORT_HIERARCHICAL=0 (CommConfig::hierarchical) keeps flat Gloo. COHORT_TEST_HOSTS_SPLIT=N groups
// one host's ranks as if on N hosts (for tests: the hierarchy's reduction order on one host).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/cross_host_link.h"
#include "comm/grown_buffer.h"
#include "comm/shm_transport.h"
#include "comm/transport.h"

namespace cohort::detail {

/// Where the ranks of a Comm run: `hosts` hosts of `per_host` consecutive ranks each; valid() when
/// the hierarchy applies (at least two hosts; one rank each runs the links alone).
struct HostLayout {
  int hosts = 0, per_host = 0;
  bool valid() const { return hosts >= 2 && per_host >= 1; }
  /// From each rank's host name, in rank order; invalid when hosts differ in rank count or a host's
  /// ranks are not consecutive.
  static HostLayout of(const std::vector<std::string>& host_of_rank);
};

struct HierConfig {
  c10::intrusive_ptr<c10d::Store> store;
  std::string prefix;  // store keys of this Comm
  int rank = 0, size = 1;
  HostLayout layout;
  bool enabled = true;  // false on any rank: flat Gloo everywhere
  size_t slot_bytes = 512 << 10;
  CrossHostLinkConfig link;  // the address, job, secret, host name and timeout; the hosts are set here
};

/// From this size the leader reduces its host's buffers alone (ShmTransport::reduce_to_first), sparing
/// the copies of allreduce(result_rank 0): 5-15 % faster from 256 KiB to 4 MiB with each host on a CPU
/// of its own, within the noise with the hosts sharing CPUs; below it both ranks' halves reduced at
/// once were faster there (docs/BENCHMARKS.md, "The leader reduces alone").
constexpr size_t kLeaderReducesBytes = 256 << 10;

/// Flipped into a leader's fingerprint on its host's last barrier when the leaders disagreed.
constexpr uint64_t kLeadersDisagreed = uint64_t(1) << 62;

class HierTransport : public Transport {
 public:
  /// Every rank of the Comm calls this (collectively, through the store). Null on every rank when
  /// some rank is disabled or some host's segment could not be made.
  static std::unique_ptr<HierTransport> negotiate(HierConfig config);
  const char* name() const override { return "hier"; }
  bool can_run(const OpData& op) const override;
  /// The agreement rides on the segments' barriers and the leaders' headers (cross_host_collectives.h).
  bool agrees() const override { return true; }
  /// The host's first barrier: the other hosts' verdicts come later, within the transfer.
  int64_t agreed_us() const override { return agreed_us_; }
  Started start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) override;
  /// Collectives completed here (tests check the path was taken).
  int64_t ops_done() const { return ops_done_; }
  const HostLayout& layout() const { return layout_; }

 private:
  HierTransport(const HierConfig& config, std::unique_ptr<ShmTransport> local);
  bool leader() const { return alone_on_host() || local_->rank() == 0; }
  /// One rank per host: no segment, every step is the link's (the timeline marks no host barrier).
  bool alone_on_host() const { return local_ == nullptr; }
  /// The leader's `buffer` to its host's ranks, under a fingerprint that fails when !agreed.
  bool finish_on_host(const at::Tensor& buffer, bool agreed, uint64_t fingerprint, const ShmWatch& watch);
  bool allreduce(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const ShmWatch& watch);
  bool broadcast(const at::Tensor& buffer, int root, uint64_t fingerprint, const ShmWatch& watch);
  bool allgather(const at::Tensor& output, const at::Tensor& input, uint64_t fingerprint, const ShmWatch& watch);
  bool reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, uint64_t fingerprint,
                      const ShmWatch& watch);

  HostLayout layout_;
  int rank_, size_, host_;
  std::unique_ptr<ShmTransport> local_;  // this host's ranks; null when it has one
  std::unique_ptr<CrossHostLink> link_;  // the leaders' (null on the other ranks)
  int64_t ops_done_ = 0;
  int64_t agreed_us_ = -1;
  GrownBuffer sums_;  // reduce_scatter's host sums (the input stays as given)
};

}  // namespace cohort::detail
