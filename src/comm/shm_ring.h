// A one-way byte stream from one process to another through shared memory: a ring of a power-of-two
// capacity with two running byte counts, "written" (advanced by the one writer) and "read" (advanced by
// the one reader), each on a cache line of its own. The writer copies bytes in and publishes them with
// a release store, the reader copies them out and frees the space the same way; either side that finds
// nothing to do waits with shm_wait on the other's futex word. One thread at a time per side (the
// mailbox holds a lock per peer and direction): this class only moves bytes.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "comm/shm_wait.h"

namespace cohort::detail {

class ShmRing {
 public:
  /// Bytes of shared memory a ring of `capacity` (a power of two) takes: its counters, then the data.
  static size_t footprint(size_t capacity) { return sizeof(Control) + capacity; }

  /// A view of the ring at `memory` (zeroed when the segment was made, so both counts start at 0).
  ShmRing(void* memory, size_t capacity)
      : control_(static_cast<Control*>(memory)),
        data_(static_cast<char*>(memory) + sizeof(Control)),
        capacity_(capacity) {}

  // The writer's side.
  size_t writable() const { return capacity_ - size_t(written_ - control_->read.load(std::memory_order_acquire)); }
  /// Copies `n` <= writable() bytes in; the reader sees them only after publish().
  void write(const void* bytes, size_t n) {
    copy_in(written_, static_cast<const char*>(bytes), n);
    written_ += n;
  }
  void publish() {
    control_->written.store(written_, std::memory_order_release);
    control_->writes.notify();
  }
  /// Waits until `n` <= capacity bytes can be written.
  void wait_writable(size_t n, const ShmWatch& watch) {
    shm_wait([&] { return writable() >= n; }, control_->reads, watch);
  }

  // The reader's side.
  size_t readable() const { return size_t(control_->written.load(std::memory_order_acquire) - read_); }
  /// Copies `n` <= readable() bytes out without consuming them.
  void peek(void* out, size_t n) const { copy_out(read_, static_cast<char*>(out), n); }
  /// Copies `n` <= readable() bytes out (to nowhere when `out` is null) and consumes them.
  void read(void* out, size_t n) {
    if (out) copy_out(read_, static_cast<char*>(out), n);
    read_ += n;
  }
  /// Frees what was read for the writer.
  void release() {
    if (control_->read.load(std::memory_order_relaxed) == read_) return;
    control_->read.store(read_, std::memory_order_release);
    control_->reads.notify();
  }
  /// Waits until more than `seen` bytes were ever published (readable() counts from read_, this from 0).
  void wait_published(uint64_t seen, const ShmWatch& watch) {
    shm_wait([&] { return control_->written.load(std::memory_order_acquire) > seen; }, control_->writes, watch);
  }
  /// Bytes this reader has taken, ever: wait_published(consumed()) waits for bytes not yet taken.
  uint64_t consumed() const { return read_; }
  size_t capacity() const { return capacity_; }

 private:
  struct Control {
    alignas(64) std::atomic<uint64_t> written;  // bytes published, ever
    ShmWakeup writes;                           // bumped by each publish
    alignas(64) std::atomic<uint64_t> read;     // bytes consumed, ever
    ShmWakeup reads;                            // bumped by each release
  };

  void copy_in(uint64_t at, const char* from, size_t n) {
    if (n == 0) return;
    const size_t offset = size_t(at & (capacity_ - 1));
    const size_t first = std::min(n, capacity_ - offset);
    std::memcpy(data_ + offset, from, first);
    std::memcpy(data_, from + first, n - first);
  }
  void copy_out(uint64_t at, char* to, size_t n) const {
    if (n == 0) return;
    const size_t offset = size_t(at & (capacity_ - 1));
    const size_t first = std::min(n, capacity_ - offset);
    std::memcpy(to, data_ + offset, first);
    std::memcpy(to + first, data_, n - first);
  }

  Control* control_;
  char* data_;
  size_t capacity_;
  uint64_t written_ = 0;  // the writer's count, ahead of control_->written until publish()
  uint64_t read_ = 0;     // the reader's count, ahead of control_->read until release()
};

}  // namespace cohort::detail
