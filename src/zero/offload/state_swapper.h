// ZeRO-Infinity's swapper: tensors of state kept in one rank's swap file (swap_file.h) between their
// uses and lent to the engine a slot at a time. A slot is a list of tensors used together (a group's
// fp32 master; its optimizer moments). The tensors keep their identity (LibTorch's optimizer finds its
// state by the parameter's TensorImpl): lending points them into a host buffer, giving back points
// them at nothing (shape [0]) and, when they changed, writes the buffer back first. Reads of the next
// slots are started ahead (prefetch) so the disk works while the engine computes; at most
// buffer_count slots hold a buffer at once beyond those lent.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "zero/offload/aligned_buffer.h"
#include "zero/offload/async_io.h"
#include "zero/offload/swap_file.h"

namespace cohort::detail {

struct SwapperOptions {
  std::string directory;  ///< nvme_path
  std::string key;        ///< the config key that named it, for errors ("offload_optimizer.nvme_path")
  std::string what;       ///< part of the file's name ("optimizer", "param")
  int rank = 0;
  AioOptions aio;
  int buffer_count = 4;  ///< slots holding a buffer (read ahead or being written) beyond those lent
};

class StateSwapper {
 public:
  using Slot = int64_t;
  explicit StateSwapper(SwapperOptions options);
  ~StateSwapper();
  StateSwapper(const StateSwapper&) = delete;
  StateSwapper& operator=(const StateSwapper&) = delete;

  /// A new slot for `tensors` (contiguous, on the CPU): the file grows by their bytes, their values are
  /// written there, and they are given back at once (their memory freed when this returns).
  Slot add_slot(std::vector<torch::Tensor> tensors);
  /// Starts reading `slot` ahead of its lend (nothing when it is lent, read or held already, or when
  /// buffer_count buffers are taken).
  void prefetch(Slot slot);
  /// Points the slot's tensors at its values in host memory (waits for a read started ahead).
  void lend(Slot slot);
  /// Lends the slot without reading it: its values are about to be overwritten whole.
  void lend_to_overwrite(Slot slot);
  /// Sets a lent slot's bytes to zero.
  void zero(Slot slot);
  /// Ends a lend: `changed` writes the values back (asynchronously); the tensors become empty.
  void give_back(Slot slot, bool changed);
  /// Waits for every read and write started; a failure is an Error of kind I/O.
  void flush();

  bool lent(Slot slot) const { return slots_[size_t(slot)].state == State::kLent; }
  int64_t slots() const { return int64_t(slots_.size()); }
  /// Bytes of the swap file, and of host memory the swapper holds now (lent, read ahead, being written).
  int64_t file_bytes() const { return file_ ? file_->bytes() : 0; }
  int64_t host_bytes() const;
  /// Bytes of the buffers kept for reuse (at most buffer_count of them): idle, like BufferPool's.
  int64_t spare_bytes() const;
  const SwapFile& file() const { return *file_; }
  const AsyncIo& io() const { return io_; }

 private:
  enum class State { kOnFile, kReading, kLent, kWriting };
  struct Part {
    torch::Tensor tensor;
    std::vector<int64_t> sizes;
    int64_t offset = 0;  // in the slot's buffer and region
  };
  struct SlotState {
    std::vector<Part> parts;
    int64_t offset = 0;  // in the file
    int64_t bytes = 0;   // aligned
    State state = State::kOnFile;
    AlignedBuffer buffer;
    AsyncIo::Ticket ticket = 0;
  };
  void start_read(SlotState& slot);
  void point_at_buffer(SlotState& slot);
  void finish_oldest_write();
  void finish(SlotState& slot);
  int64_t buffers_held() const;
  AlignedBuffer take_buffer(int64_t bytes);
  void release_buffer(SlotState& slot);

  SwapperOptions options_;
  std::unique_ptr<SwapFile> file_;
  AsyncIo io_;
  std::vector<SlotState> slots_;
  std::deque<Slot> writing_;  // in the order their writes started
  // Buffers given back, reused by the next slot of the same size (a GPT's blocks all have the same):
  // freeing and allocating unit-sized blocks every lend fragments the heap under cohort's malloc
  // policy and costs a page fault per page of every read (measured: +0.6 GiB per rank at 24 blocks).
  std::vector<AlignedBuffer> spare_;
};

}  // namespace cohort::detail
