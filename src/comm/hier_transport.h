// Collectives across hosts in two levels (docs/design/transports.md): the ranks of each host reduce
// or gather through a shared-memory segment of their own, one leader per host (its first rank) runs
// the inter-host step on a Gloo group of leaders, and the leader's result is broadcast through the
// segment again. Chosen when every host holds the same number (>= 2) of consecutive ranks;
// COHORT_HIERARCHICAL=0 (CommConfig::hierarchical) keeps flat Gloo. COHORT_TEST_HOSTS_SPLIT=N groups
// one host's ranks as if on N hosts (for tests: the hierarchy's reduction order on one host).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>
#include <vector>

#include "comm/shm_transport.h"
#include "comm/transport.h"
#include "compat/c10d_compat.h"

namespace cohort::detail {

/// Where the ranks of a Comm run: `hosts` hosts of `per_host` consecutive ranks each; valid() when
/// the hierarchy applies (at least two hosts of at least two ranks each).
struct HostLayout {
  int hosts = 0, per_host = 0;
  bool valid() const { return hosts >= 2 && per_host >= 2; }
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
  BackendConfig leaders;  // the leaders' Gloo group (store, rank and size are set here)
};

class HierTransport : public Transport {
 public:
  /// Every rank of the Comm calls this (collectively, through the store). Null on every rank when
  /// some rank is disabled or some host's segment could not be made.
  static std::unique_ptr<HierTransport> negotiate(HierConfig config);
  ~HierTransport() override;
  const char* name() const override { return "hier"; }
  bool can_run(const OpData& op) const override;
  Started start(const OpData& op, uint64_t fingerprint, const ShmWatch& watch) override;
  /// A poisoned Comm: the leaders' group may have a worker blocked until c10d's timeout; leak it.
  void abandon() { leaders_.release(); }
  /// Collectives completed here (tests check the path was taken).
  int64_t ops_done() const { return ops_done_; }
  const HostLayout& layout() const { return layout_; }

 private:
  HierTransport(const HierConfig& config, std::unique_ptr<ShmTransport> local);
  bool leader() const { return local_->rank() == 0; }
  /// Waits for a leader's inter-host step, watching the peers; rethrows its error.
  void finish(const c10::intrusive_ptr<c10d::Work>& work, const ShmWatch& watch);
  bool allreduce(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const ShmWatch& watch);
  bool broadcast(const at::Tensor& buffer, int root, uint64_t fingerprint, const ShmWatch& watch);
  bool allgather(const at::Tensor& output, const at::Tensor& input, uint64_t fingerprint, const ShmWatch& watch);
  bool reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, uint64_t fingerprint,
                      const ShmWatch& watch);

  HostLayout layout_;
  int rank_, size_, host_;
  std::unique_ptr<ShmTransport> local_;           // this host's ranks
  c10::intrusive_ptr<ProcessGroupBase> leaders_;  // one rank per host; null on the other ranks
  int64_t ops_done_ = 0;
};

}  // namespace cohort::detail
