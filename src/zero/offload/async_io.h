// Asynchronous reads and writes of host buffers to swap files (ZeRO-Infinity's NVMe traffic), the
// "aio" section of a ds_config: each request is cut into block_size pieces, at most queue_depth of
// them in flight, submitted through io_uring (liburing) so the engine's thread computes while the
// disk works. Without io_uring (a kernel that disables it, a build without liburing) the pieces run
// synchronously on the calling thread: correct, without overlap (warned once). Every failure (an
// errno, a short read of a shortened file) is an Error of kind I/O naming the file, offset and rank.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

namespace cohort::detail {

class SwapFile;
struct UringState;  // async_io.cpp: the ring, when io_uring is there

/// DeepSpeed's "aio" keys.
struct AioOptions {
  int64_t block_size = 1 << 20;  ///< bytes per request (a multiple of 4096)
  int queue_depth = 8;           ///< requests in flight at once
  bool single_submit = false;    ///< submit each request alone instead of in batches
  bool overlap_events = true;    ///< keep the queue full while waiting (false: submit, then drain)
};

class AsyncIo {
 public:
  using Ticket = int64_t;
  explicit AsyncIo(AioOptions options);
  ~AsyncIo();
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  /// Starts reading `bytes` at `offset` of `file` into `buffer` (both aligned for direct I/O, as
  /// AlignedBuffer is); the bytes are there after wait(ticket).
  Ticket read(const SwapFile& file, int64_t offset, void* buffer, int64_t bytes);
  /// Starts writing; `buffer` must stay unchanged until wait(ticket).
  Ticket write(const SwapFile& file, int64_t offset, const void* buffer, int64_t bytes);
  /// Waits for every piece of `ticket`; throws the first failure among them.
  void wait(Ticket ticket);
  /// Waits for everything started; throws the first failure.
  void wait_all();
  /// Whether requests overlap the caller (io_uring), or run as they are started.
  bool asynchronous() const { return ring_ != nullptr; }
  int64_t in_flight() const { return int64_t(flying_.size()); }
  /// Bytes of the reads and writes started so far (what offload moves: MemoryReport::file_io_bytes).
  int64_t bytes_started() const { return bytes_started_; }

 private:
  struct Piece {
    Ticket ticket;
    const SwapFile* file;
    bool is_write;
    int64_t offset;
    char* buffer;
    int64_t bytes;
  };
  struct Progress {
    int64_t pending = 0;  // pieces not finished yet
    std::string error;    // the first failure
  };
  Ticket start(const SwapFile& file, bool is_write, int64_t offset, char* buffer, int64_t bytes);
  void submit_queued();
  void submit_prepared();
  void reap_one();
  void finish(const Piece& piece, int64_t result);
  void run_synchronously(const Piece& piece);

  AioOptions options_;
  std::unique_ptr<UringState> ring_;
  std::deque<Piece> queued_;                   // cut, not submitted yet
  std::unordered_map<int64_t, Piece> flying_;  // submitted, by request id
  std::unordered_map<Ticket, Progress> tickets_;
  int64_t next_ticket_ = 1;
  int64_t next_request_ = 1;
  int64_t bytes_started_ = 0;
};

}  // namespace cohort::detail
