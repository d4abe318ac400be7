// Shared-memory data path for ranks that all run on one host. Gloo over loopback TCP copies every
// byte through the kernel twice and reduces on its own threads; on a node whose cores are all busy
// training, that CPU time comes out of the step. Here every rank maps one POSIX shared-memory segment
// holding a slot per rank (three times, in rotation), and a collective is done chunk by chunk with memcpy,
// vectorized elementwise reductions (comm/shm_reduce.h) and a barrier:
//   allreduce      copy in the peers' slices -> barrier -> rank r reduces slice r of every rank (its own
//                  from its own memory) into slice r of its slot, and copies in the next chunk ->
//                  barrier -> copy every slice of the chunk out (one barrier per chunk, pipelined)
//   reduce to 0    the others copy in -> barrier -> rank 0 reduces every slot into its own buffer
//   reduce_scatter copy in the peers' blocks -> barrier -> rank r reduces its block of every rank
//   allgather      copy in -> barrier -> copy every slot out
//   broadcast      root copies in -> barrier -> the others copy out
// Rotating over three sets of slots makes one barrier per chunk enough to keep a rank from overwriting
// a slot a peer still reads (next_set). Sums are taken in rank order on every rank, so results are
// bitwise identical everywhere and from run to run. The segment is unlinked as soon as every rank has
// mapped it, so a crash after set-up leaves nothing behind in /dev/shm; one during set-up leaves a name
// that the next job's rank 0 removes (comm/shm_stale.h).
//
// The barrier is a counter per rank on a cache line of its own (no shared counter the ranks fight
// over): a rank publishes how many barriers it reached and waits until every peer's count is as high,
// spinning briefly (collectives on one host complete within microseconds of each other) and then
// sleeping on a futex, looking at its peers (Watch) every few milliseconds. A barrier may carry the
// collective's fingerprint hash: every rank reads every peer's, so the agreement that the control plane
// does over sockets between hosts costs no more here than the barrier the data needs anyway. Ranks
// whose fingerprints differ all see it at that barrier, before any peer's data is read.
//
// After the slots, the segment holds a one-way ring per ordered pair of ranks (comm/shm_ring.h) for
// point-to-point messages (comm/shm_mailbox.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "cohort/comm.h"
#include "comm/cpu_spread.h"
#include "comm/shm_ring.h"
#include "comm/shm_wait.h"

namespace cohort::detail {

struct ShmHeader;  // the segment's first page: magic, size, the barrier's words (shm_transport.cpp)

class ShmTransport {
 public:
  /// Called every few milliseconds while a rank waits for its peers; throws to give up (a peer died,
  /// an abort notice arrived, the collective's deadline passed).
  using Watch = ShmWatch;

  /// Every rank of the group calls this (collectively, through `store` under `prefix`). Returns a
  /// transport when all `size` ranks could map the same segment, else null on every rank. `enabled`
  /// false on a rank (COHORT_SHM=0) makes it null everywhere. `slot_bytes`: bytes per rank per chunk.
  static std::unique_ptr<ShmTransport> negotiate(c10d::Store& store, const std::string& prefix, int rank, int size,
                                                 bool enabled, size_t slot_bytes);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  /// Whether reduce(op) on this dtype runs here (else the caller uses Gloo): float32/64 and integers.
  static bool can_reduce(const at::Tensor& t);
  /// Byte moves (allgather, broadcast) take any contiguous CPU tensor.
  static bool can_move(const at::Tensor& t);

  // Each collective takes its fingerprint hash (comm/fingerprint.h) and returns false, having read no
  // peer's data, when some rank's differs (a desync: the caller explains it); true when done.

  /// Agreement alone, for a collective whose data moves elsewhere (Gloo) or not at all (barrier).
  bool agree(uint64_t fingerprint, const Watch& watch);
  /// In place; kAvg is a sum here (the caller divides). `result_rank` >= 0: only that rank copies the
  /// result out (the others' buffers are left as they were: the hierarchy's leader alone needs it).
  bool allreduce(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const Watch& watch, int result_rank = -1);
  /// Rank 0's `buffer` receives the reduction of every rank's (the others' stay as they were; kAvg a
  /// sum): per chunk the others copy in, one barrier, rank 0 reduces their slots into its own memory.
  /// Against allreduce(result_rank 0) rank 0 copies nothing in or out, but reduces alone.
  bool reduce_to_first(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const Watch& watch);
  /// `input` holds size() equal blocks; block rank() of the reduction lands in `output`.
  bool reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, uint64_t fingerprint,
                      const Watch& watch);
  /// `output` receives every rank's `input`, in rank order.
  bool allgather(const at::Tensor& output, const at::Tensor& input, uint64_t fingerprint, const Watch& watch);
  bool broadcast(const at::Tensor& buffer, int root, uint64_t fingerprint, const Watch& watch);

  /// Sets of slots, one slot per rank each, that consecutive chunks rotate over (next_set).
  static constexpr int kSlotSets = 3;
  size_t slot_bytes() const { return slot_bytes_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The memory of the point-to-point ring from rank `from` to rank `to` (ShmRing's layout).
  void* ring_memory(int from, int to) const;
  size_t ring_capacity() const;
  /// Collectives completed here (tests check the path was taken).
  int64_t ops_done() const { return ops_done_; }
  /// The timeline: when the last agreement completed (trace::now_us()), -1 while tracing is off.
  int64_t agreed_us() const { return agreed_us_; }

 private:
  ShmTransport(int rank, int size, size_t slot_bytes, void* base, size_t mapped_bytes);
  struct RankLine;  // one rank's barrier count and fingerprints, on a cache line of its own
  RankLine& line(int rank) const;

  /// The next chunk's set of slots (0, 1 or 2), in rotation over every chunk of every collective. A set
  /// is written again three chunks later: by then every rank has passed a barrier that each peer
  /// reached only after reading the set for the last time, also in allreduce's pipeline, where a
  /// chunk's copy-out follows the barrier that the next chunk's copy-in precedes.
  int next_set() { return int(chunks_++ % kSlotSets); }
  char* slot(int set, int rank) const;
  /// Waits until every rank reached this barrier. With `fingerprint`, also compares every rank's:
  /// false when they differ (every rank sees the same verdict).
  bool barrier(const Watch& watch, const uint64_t* fingerprint = nullptr);
  /// Spins, then sleeps, until every peer's barrier count reached `count`.
  void wait_for_peers(uint64_t count, const Watch& watch);
  bool peers_reached(uint64_t count) const;
  /// Whether a peer that has not reached barrier `count` last arrived on the CPU this rank runs on.
  bool late_peer_shares_cpu(uint64_t count) const;

  int rank_, size_;
  size_t slot_bytes_;
  void* base_;
  size_t mapped_bytes_;
  ShmHeader* header_;
  uint64_t chunks_ = 0;
  uint64_t barriers_ = 0;  // barriers this rank reached
  int64_t agreed_us_ = -1;
  int64_t ops_done_ = 0;
  CpuSpread spread_;  // moves this rank off a CPU a waited-for peer shares (unbound ranks)
};

}  // namespace cohort::detail
