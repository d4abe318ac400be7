// Shared-memory collectives for ranks on one host (see shm_transport.h for the protocol).
#include "comm/shm_transport.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "comm/shm_reduce.h"
#include "comm/shm_stale.h"
#include "comm/shm_wait.h"
#include "core/log.h"
#include "core/trace_recorder.h"

namespace cohort::detail {

struct ShmHeader {
  uint64_t magic;  // random, written by rank 0: proves every rank mapped the same memory
  uint32_t size;
  alignas(64) ShmWakeup arrivals;  // bumped by every arrival at a barrier
};

struct ShmTransport::RankLine {
  alignas(64) std::atomic<uint64_t> barriers;  // barriers this rank reached
  std::atomic<uint64_t> fingerprint[2];        // the fingerprint of barrier k, at [k % 2]
  std::atomic<int32_t> cpu;                    // the CPU this rank ran on at its last arrival (shm_wait)
};

namespace {

constexpr size_t kLineBytes = 64;

// The header page(s): ShmHeader, then one RankLine per rank.
size_t header_bytes(int size) { return (kLineBytes * (2 + size_t(size)) + 4095) / 4096 * 4096; }

// Point-to-point rings, one per ordered pair of ranks: a power of two from 4 to 256 KiB, smaller as
// the pairs multiply, so that all of them take at most about 8 MiB of /dev/shm (16 MiB at 64 ranks).
size_t ring_capacity_for(int size) {
  const size_t pairs = size_t(size) * size_t(std::max(size - 1, 1));
  size_t capacity = size_t(256) << 10;
  while (capacity > 4096 && capacity * pairs > (size_t(8) << 20)) capacity /= 2;
  return capacity;
}

size_t ring_stride(int size) { return ShmRing::footprint(ring_capacity_for(size)); }

size_t slots_bytes(int size, size_t slot_bytes) { return size_t(ShmTransport::kSlotSets) * size_t(size) * slot_bytes; }

size_t mapped_size(int size, size_t slot_bytes) {
  return header_bytes(size) + slots_bytes(size, slot_bytes) + size_t(size) * size_t(size - 1) * ring_stride(size);
}

void* map_segment(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return base == MAP_FAILED ? nullptr : base;
}

// Start of part `j` when `n` elements are split into `parts` nearly equal parts.
int64_t split_point(int64_t n, int parts, int j) { return n * j / parts; }

std::string text_of(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> bytes_of(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

struct Segment {
  std::string name;  // empty: none
  void* base = nullptr;
  int lock_fd = -1;  // rank 0: open, with the owner's lock (shm_stale.h), until the name is unlinked
};

// Rank 0's segment: a fresh name that carries a random magic, its pages reserved now. An empty Segment
// and `failure` set when /dev/shm cannot hold it.
Segment create_shm_segment(int size, size_t slot_bytes, std::string& failure) {
  for (const std::string& stale : remove_stale_shm_segments())
    COHORT_INFO("removed ", stale, " from /dev/shm: a segment left by a job whose rank 0 died during set-up");
  std::random_device random;
  const uint64_t magic = (uint64_t(random()) << 32) ^ random();
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "/cohort-%d-%016llx", int(getpid()), static_cast<unsigned long long>(magic));
  Segment segment{buffer};
  const size_t bytes = mapped_size(size, slot_bytes);
  const int fd = shm_open(segment.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd >= 0) lock_shm_segment(fd);  // "this job is alive" to the next job's stale-segment sweep
  // posix_fallocate reserves the pages now, so a full /dev/shm is a clean fallback here and not a
  // SIGBUS in the middle of a collective.
  const int err = fd < 0 ? errno : posix_fallocate(fd, 0, off_t(bytes));
  if (err == 0) segment.base = map_segment(fd, bytes);
  if (err == 0 && segment.base) segment.lock_fd = fd;
  else if (fd >= 0) close(fd);
  if (err != 0 || !segment.base) {
    failure = "cannot create " + std::to_string(bytes) + " bytes in /dev/shm (" + std::strerror(err ? err : errno) +
              "; COHORT_SHM_BYTES sets the bytes per rank per chunk)";
    if (fd >= 0) shm_unlink(segment.name.c_str());
    return {};
  }
  auto* header = new (segment.base) ShmHeader();
  header->magic = magic;
  header->size = uint32_t(size);
  return segment;
}

// Another rank maps the segment rank 0 published ("name slot_bytes"); nullptr when it cannot. The name
// carries rank 0's magic: a same-named segment of another host or container cannot pass.
void* map_published_segment(const std::string& published, int size, size_t& slot_bytes) {
  const auto space = published.find(' ');
  const std::string name = published.substr(0, space);
  slot_bytes = std::stoull(published.substr(space + 1));
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  void* base = map_segment(fd, mapped_size(size, slot_bytes));
  close(fd);
  const auto dash = name.rfind('-');
  if (base && static_cast<ShmHeader*>(base)->size == uint32_t(size) &&
      static_cast<ShmHeader*>(base)->magic == std::stoull(name.substr(dash + 1), nullptr, 16))
    return base;
  if (base) munmap(base, mapped_size(size, slot_bytes));
  return nullptr;
}

// Rank 0 collects every rank's answer, removes the segment's name (all have mapped it or given up),
// publishes the verdict and says once which transport CPU collectives use and why.
bool decide_shm_verdict(c10d::Store& store, const std::string& key, int size, const Segment& segment,
                        const std::string& failure, size_t slot_bytes, bool enabled) {
  bool all_ok = !segment.name.empty();
  std::string missing;
  for (int r = 1; r < size; ++r) {
    if (text_of(store.get(key + "ok" + std::to_string(r))) != "1") {
      all_ok = false;
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  if (!segment.name.empty()) shm_unlink(segment.name.c_str());
  if (segment.lock_fd >= 0) close(segment.lock_fd);  // the name is gone: nothing left to protect
  store.set(key + "verdict", bytes_of(all_ok ? "1" : "0"));
  if (all_ok) {
    COHORT_INFO("shared-memory transport for the ", size, " ranks on this host (", slot_bytes,
                "-byte chunks; COHORT_SHM=0 uses Gloo instead)");
  } else if (!enabled) {
    COHORT_INFO("shared-memory transport off (COHORT_SHM=0): collectives on CPU tensors use Gloo");
  } else {
    COHORT_INFO("shared-memory transport not used, collectives on CPU tensors use Gloo: ",
                failure.empty() ? "rank(s) " + missing +
                                      " could not map rank 0's segment (another host, or "
                                      "COHORT_SHM=0 there)"
                                : failure);
  }
  return all_ok;
}

}  // namespace

std::unique_ptr<ShmTransport> ShmTransport::negotiate(c10d::Store& store, const std::string& prefix, int rank, int size,
                                                      bool enabled, size_t slot_bytes) {
  const std::string key = prefix + "/shm/";
  slot_bytes = (std::max<size_t>(slot_bytes, 4096) + 4095) / 4096 * 4096;
  Segment segment;
  std::string failure;
  bool all_ok = false;
  if (rank == 0) {
    if (enabled) segment = create_shm_segment(size, slot_bytes, failure);
    store.set(key + "name", bytes_of(segment.name.empty() ? "" : segment.name + " " + std::to_string(slot_bytes)));
    all_ok = decide_shm_verdict(store, key, size, segment, failure, slot_bytes, enabled);
  } else {
    const std::string published = text_of(store.get(key + "name"));
    if (enabled && !published.empty()) segment.base = map_published_segment(published, size, slot_bytes);
    store.set(key + "ok" + std::to_string(rank), bytes_of(segment.base ? "1" : "0"));
    all_ok = text_of(store.get(key + "verdict")) == "1";
  }
  const size_t bytes = mapped_size(size, slot_bytes);
  if (!all_ok) {
    if (segment.base) munmap(segment.base, bytes);
    return nullptr;
  }
  return std::unique_ptr<ShmTransport>(new ShmTransport(rank, size, slot_bytes, segment.base, bytes));
}

ShmTransport::ShmTransport(int rank, int size, size_t slot_bytes, void* base, size_t mapped_bytes)
    : rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      base_(base),
      mapped_bytes_(mapped_bytes),
      header_(static_cast<ShmHeader*>(base)) {}

ShmTransport::~ShmTransport() { munmap(base_, mapped_bytes_); }

bool ShmTransport::can_reduce(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kInt:
    case at::kLong:
    case at::kShort:
    case at::kChar:
    case at::kByte: return can_move(t);
    default: return false;  // half and bfloat16 reductions stay on Gloo (the caller upcasts bfloat16)
  }
}

bool ShmTransport::can_move(const at::Tensor& t) { return t.is_cpu() && t.is_contiguous(); }

char* ShmTransport::slot(int set, int rank) const {
  return static_cast<char*>(base_) + header_bytes(size_) + (size_t(set) * size_ + rank) * slot_bytes_;
}

void* ShmTransport::ring_memory(int from, int to) const {
  // Pairs in order (0,1), (0,2), ..., (1,0), (1,2), ...: no ring from a rank to itself.
  const size_t pair = size_t(from) * size_t(size_ - 1) + size_t(to < from ? to : to - 1);
  return static_cast<char*>(base_) + header_bytes(size_) + slots_bytes(size_, slot_bytes_) + pair * ring_stride(size_);
}

size_t ShmTransport::ring_capacity() const { return ring_capacity_for(size_); }

ShmTransport::RankLine& ShmTransport::line(int rank) const {
  // The segment's pages start zeroed (posix_fallocate): every rank's count is 0 before its first barrier.
  return *reinterpret_cast<RankLine*>(static_cast<char*>(base_) + kLineBytes * (2 + size_t(rank)));
}

bool ShmTransport::peers_reached(uint64_t count) const {
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && line(r).barriers.load(std::memory_order_acquire) < count) return false;
  return true;
}

bool ShmTransport::late_peer_shares_cpu(uint64_t count) const {
  const int here = sched_getcpu();  // the vDSO's: tens of nanoseconds
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && line(r).barriers.load(std::memory_order_relaxed) < count &&
        line(r).cpu.load(std::memory_order_relaxed) == here)
      return true;
  return false;
}

void ShmTransport::wait_for_peers(uint64_t count, const Watch& watch) {
  shm_wait([&] { return peers_reached(count); }, header_->arrivals, watch,
           [&] {
             if (!late_peer_shares_cpu(count)) return false;
             if (!spread_.due()) return true;
             std::vector<int> used(size_);
             for (int r = 0; r < size_; ++r) used[r] = line(r).cpu.load(std::memory_order_relaxed);
             spread_.move_off(sched_getcpu(), used, rank_);  // note in comm/cpu_spread.h
             return true;
           });
}

bool ShmTransport::barrier(const Watch& watch, const uint64_t* fingerprint) {
  const uint64_t count = ++barriers_;
  RankLine& mine = line(rank_);
  // A peer overwrites slot count % 2 only at barrier count + 2, which it cannot reach before this rank
  // arrived at count + 1, after reading below: two slots are enough.
  if (fingerprint) mine.fingerprint[count % 2].store(*fingerprint, std::memory_order_relaxed);
  mine.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  mine.barriers.store(count, std::memory_order_release);
  header_->arrivals.notify();
  wait_for_peers(count, watch);
  if (!fingerprint) return true;
  if (trace::enabled()) agreed_us_ = trace::now_us();
  for (int r = 0; r < size_; ++r)
    if (line(r).fingerprint[count % 2].load(std::memory_order_relaxed) != *fingerprint) return false;
  return true;
}

bool ShmTransport::agree(uint64_t fingerprint, const Watch& watch) { return barrier(watch, &fingerprint); }

bool ShmTransport::allreduce(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const Watch& watch,
                             int result_rank) {
  const auto dtype = buffer.scalar_type();
  const size_t item = buffer.element_size();
  const int64_t chunk = int64_t(slot_bytes_ / item);
  const int64_t numel = buffer.numel();
  char* data = static_cast<char*>(buffer.data_ptr());
  std::vector<const void*> parts(size_);
  // Slice r of a chunk of n elements, in bytes: [first, second).
  auto slice = [&](int64_t n, int r) {
    return std::make_pair(split_point(n, size_, r) * item, split_point(n, size_, r + 1) * item);
  };
  // Publishes the slices of the chunk at `start` that the peers reduce (this rank reads its own slice
  // from its own memory); returns the chunk's set.
  auto copy_in = [&](int64_t start) {
    const int set = next_set();
    const int64_t n = std::min(chunk, numel - start);
    for (int q = 0; q < size_; ++q) {
      const auto [a, b] = slice(n, q);
      if (q != rank_) std::memcpy(slot(set, rank_) + a, data + start * item + a, b - a);
    }
    return set;
  };
  // Pipelined, one barrier per chunk: chunk k is reduced and chunk k+1 copied in before the barrier,
  // chunk k copied out after it. Three sets of slots make that safe (see next_set).
  int set = copy_in(0);
  if (!barrier(watch, &fingerprint)) return false;
  for (int64_t start = 0; start < numel; start += chunk) {
    const int64_t n = std::min(chunk, numel - start);
    char* chunk_data = data + start * item;
    // Reduce my slice of every rank, in rank order, into the unused slice of my slot: published as is.
    const auto [lo, hi] = slice(n, rank_);
    for (int r = 0; r < size_; ++r) parts[r] = r == rank_ ? chunk_data + lo : slot(set, r) + lo;
    reduce_parts(slot(set, rank_) + lo, parts, int64_t((hi - lo) / item), dtype, op);
    const int next = start + chunk < numel ? copy_in(start + chunk) : -1;
    barrier(watch);
    for (int r = 0; r < size_ && (result_rank < 0 || result_rank == rank_); ++r) {
      const auto [a, b] = slice(n, r);
      std::memcpy(chunk_data + a, slot(set, r) + a, b - a);
    }
    set = next;
  }
  ++ops_done_;
  return true;
}

bool ShmTransport::reduce_to_first(const at::Tensor& buffer, ReduceOp op, uint64_t fingerprint, const Watch& watch) {
  const size_t item = buffer.element_size();
  const int64_t chunk = int64_t(slot_bytes_ / item), numel = buffer.numel();
  char* data = static_cast<char*>(buffer.data_ptr());
  std::vector<const void*> parts(size_);
  for (int64_t start = 0; start < numel; start += chunk) {
    const int64_t n = std::min(chunk, numel - start);
    char* chunk_data = data + start * item;
    const int set = next_set();
    if (rank_ != 0) std::memcpy(slot(set, rank_), chunk_data, n * item);
    if (!barrier(watch, start == 0 ? &fingerprint : nullptr)) return false;
    if (rank_ != 0) continue;
    // Rank order, as allreduce sums: the same bits. Rank 0 reads this set before its next barrier,
    // and a peer writes the set again only three chunks on (next_set).
    for (int r = 0; r < size_; ++r) parts[r] = r == 0 ? chunk_data : slot(set, r);
    reduce_parts(chunk_data, parts, n, buffer.scalar_type(), op);
  }
  ++ops_done_;
  return true;
}

bool ShmTransport::reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, uint64_t fingerprint,
                                  const Watch& watch) {
  const auto dtype = input.scalar_type();
  const size_t item = input.element_size();
  const int64_t block = output.numel();  // each rank's share of the input
  const int64_t chunk = int64_t(slot_bytes_ / (item * size_));
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  std::vector<const void*> parts(size_);
  for (int64_t start = 0; start < block; start += chunk) {
    const int64_t n = std::min(chunk, block - start);
    const int set = next_set();
    // Publish the blocks the peers reduce; this rank reads its own block from the input.
    for (int q = 0; q < size_; ++q)
      if (q != rank_) std::memcpy(slot(set, rank_) + q * n * item, in + (q * block + start) * item, n * item);
    if (!barrier(watch, start == 0 ? &fingerprint : nullptr)) return false;
    for (int r = 0; r < size_; ++r)
      parts[r] = r == rank_ ? in + (rank_ * block + start) * item : slot(set, r) + rank_ * n * item;
    reduce_parts(out + start * item, parts, n, dtype, op);
  }
  ++ops_done_;
  return true;
}

bool ShmTransport::allgather(const at::Tensor& output, const at::Tensor& input, uint64_t fingerprint,
                             const Watch& watch) {
  const size_t bytes = input.nbytes();
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  for (size_t start = 0; start < bytes; start += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, bytes - start);
    const int set = next_set();
    std::memcpy(slot(set, rank_), in + start, n);
    if (!barrier(watch, start == 0 ? &fingerprint : nullptr)) return false;
    for (int r = 0; r < size_; ++r) std::memcpy(out + r * bytes + start, slot(set, r), n);
  }
  ++ops_done_;
  return true;
}

bool ShmTransport::broadcast(const at::Tensor& buffer, int root, uint64_t fingerprint, const Watch& watch) {
  const size_t bytes = buffer.nbytes();
  char* data = static_cast<char*>(buffer.data_ptr());
  for (size_t start = 0; start < bytes; start += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, bytes - start);
    const int set = next_set();
    if (rank_ == root) std::memcpy(slot(set, root), data + start, n);
    if (!barrier(watch, start == 0 ? &fingerprint : nullptr)) return false;
    if (rank_ != root) std::memcpy(data + start, slot(set, root), n);
  }
  ++ops_done_;
  return true;
}

}  // namespace cohort::detail
