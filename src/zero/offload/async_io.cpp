// AsyncIo (see async_io.h). Requests wait in `queued_` until the ring has room (queue_depth); each
// completion frees a slot, and a short transfer is resubmitted for its remainder (a read that gets 0
// bytes has reached the file's end: the file was shortened, an error).
#include "zero/offload/async_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "cohort/error.h"
#include "cohort_config.h"
#include "core/check.h"
#include "core/log.h"
#include "zero/offload/aligned_buffer.h"
#include "zero/offload/swap_file.h"

#if COHORT_WITH_LIBURING
#include <liburing.h>
#endif

namespace cohort::detail {

#if COHORT_WITH_LIBURING
struct UringState {
  io_uring ring{};
  ~UringState() { io_uring_queue_exit(&ring); }
};
#else
struct UringState {};
#endif

namespace {

void check_options(const AioOptions& options) {
  COHORT_CHECK_KIND(
      kInvalidArgument, options.block_size >= kDirectIoAlignment && options.block_size % kDirectIoAlignment == 0,
      "aio.block_size: must be a positive multiple of ", kDirectIoAlignment, " bytes, got ", options.block_size);
  COHORT_CHECK_KIND(kInvalidArgument, options.queue_depth >= 1 && options.queue_depth <= 4096,
                    "aio.queue_depth: must be from 1 to 4096, got ", options.queue_depth);
}

std::unique_ptr<UringState> open_ring(int entries) {
#if COHORT_WITH_LIBURING
  auto state = std::make_unique<UringState>();
  const int failed = io_uring_queue_init(unsigned(entries), &state->ring, 0);
  if (failed == 0) return state;
  state.release();  // never initialised: nothing to exit
  COHORT_WARN("io_uring is not available here (", std::strerror(-failed),
              "): offloaded states are read and written synchronously, without overlapping compute");
#else
  COHORT_WARN(
      "cohort was built without liburing: offloaded states are read and written synchronously, without "
      "overlapping compute");
#endif
  return nullptr;
}

std::string failure_text(const SwapFile& file, bool is_write, int64_t offset, int64_t bytes, const std::string& what) {
  return std::string(is_write ? "writing " : "reading ") + std::to_string(bytes) + " bytes at offset " +
         std::to_string(offset) + " of the swap file " + file.path() + " (rank " + std::to_string(file.rank()) +
         ") failed: " + what;
}

}  // namespace

AsyncIo::AsyncIo(AioOptions options) : options_(options) {
  check_options(options_);
  ring_ = open_ring(options_.queue_depth);
}

AsyncIo::~AsyncIo() {
  try {
    wait_all();  // the kernel must not write into buffers freed after this
  } catch (const std::exception& e) {
    COHORT_WARN("offload I/O still in flight at the end failed: ", e.what());
  }
}

AsyncIo::Ticket AsyncIo::read(const SwapFile& file, int64_t offset, void* buffer, int64_t bytes) {
  return start(file, false, offset, static_cast<char*>(buffer), bytes);
}

AsyncIo::Ticket AsyncIo::write(const SwapFile& file, int64_t offset, const void* buffer, int64_t bytes) {
  return start(file, true, offset, static_cast<char*>(const_cast<void*>(buffer)), bytes);
}

AsyncIo::Ticket AsyncIo::start(const SwapFile& file, bool is_write, int64_t offset, char* buffer, int64_t bytes) {
  COHORT_CHECK_KIND(kInternal, offset >= 0 && bytes >= 0 && offset + bytes <= file.bytes(),
                    "offload I/O outside the swap file ", file.path(), ": ", bytes, " bytes at ", offset, " of ",
                    file.bytes());
  const Ticket ticket = next_ticket_++;
  bytes_started_ += bytes;
  Progress& progress = tickets_[ticket];
  for (int64_t done = 0; done < bytes; done += options_.block_size) {
    const int64_t piece = std::min(options_.block_size, bytes - done);
    queued_.push_back(Piece{ticket, &file, is_write, offset + done, buffer + done, piece});
    ++progress.pending;
  }
  submit_queued();
  return ticket;
}

void AsyncIo::run_synchronously(const Piece& piece) {
  int64_t done = 0;
  while (done < piece.bytes) {
    const ssize_t n = piece.is_write ? ::pwrite(piece.file->fd(), piece.buffer + done, size_t(piece.bytes - done),
                                                piece.offset + done)
                                     : ::pread(piece.file->fd(), piece.buffer + done, size_t(piece.bytes - done),
                                               piece.offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // the failure names the part not transferred, as a resubmitted remainder would
      const int64_t result = n < 0 ? -errno : 0;
      return finish(
          Piece{piece.ticket, piece.file, piece.is_write, piece.offset + done, piece.buffer + done, piece.bytes - done},
          result);
    }
    done += n;
  }
  finish(piece, done);
}

void AsyncIo::submit_queued() {
#if COHORT_WITH_LIBURING
  if (ring_ != nullptr) {
    while (!queued_.empty() && in_flight() < options_.queue_depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
      if (sqe == nullptr) break;
      const Piece piece = queued_.front();
      queued_.pop_front();
      if (piece.is_write) io_uring_prep_write(sqe, piece.file->fd(), piece.buffer, unsigned(piece.bytes), piece.offset);
      else io_uring_prep_read(sqe, piece.file->fd(), piece.buffer, unsigned(piece.bytes), piece.offset);
      const int64_t id = next_request_++;
      io_uring_sqe_set_data64(sqe, uint64_t(id));
      flying_.emplace(id, piece);
      if (options_.single_submit) submit_prepared();
    }
    submit_prepared();
    return;
  }
#endif
  while (!queued_.empty()) {
    const Piece piece = queued_.front();
    queued_.pop_front();
    run_synchronously(piece);
  }
}

// Hands the prepared requests to the kernel (none prepared: nothing happens).
void AsyncIo::submit_prepared() {
#if COHORT_WITH_LIBURING
  const int submitted = io_uring_submit(&ring_->ring);
  COHORT_CHECK_KIND(kIO, submitted >= 0, "submitting offload I/O failed: ", std::strerror(-submitted));
#endif
}

// Takes one completion off the ring (waiting for it) and frees its slot.
void AsyncIo::reap_one() {
#if COHORT_WITH_LIBURING
  io_uring_cqe* cqe = nullptr;
  int failed = 0;
  do failed = io_uring_wait_cqe(&ring_->ring, &cqe);
  while (failed == -EINTR);
  COHORT_CHECK_KIND(kIO, failed == 0, "waiting for offload I/O failed: ", std::strerror(-failed));
  const int64_t id = int64_t(io_uring_cqe_get_data64(cqe));
  const int64_t result = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  const auto found = flying_.find(id);
  COHORT_CHECK_KIND(kInternal, found != flying_.end(), "offload I/O: a completion for unknown request ", id);
  const Piece piece = found->second;
  flying_.erase(found);
  if (result > 0 && result < piece.bytes) {  // a short transfer: the rest goes again
    queued_.push_front(Piece{piece.ticket, piece.file, piece.is_write, piece.offset + result, piece.buffer + result,
                             piece.bytes - result});
    return;
  }
  finish(piece, result);
#endif
}

void AsyncIo::finish(const Piece& piece, int64_t result) {
  Progress& progress = tickets_[piece.ticket];
  --progress.pending;
  if (result >= piece.bytes || !progress.error.empty()) return;
  progress.error = failure_text(
      *piece.file, piece.is_write, piece.offset, piece.bytes,
      result < 0 ? std::strerror(int(-result)) : "the file ended early (it was shortened while the job ran)");
}

void AsyncIo::wait(Ticket ticket) {
  const auto found = tickets_.find(ticket);
  COHORT_CHECK_KIND(kInternal, found != tickets_.end(), "offload I/O: waiting for unknown ticket ", ticket);
  while (found->second.pending > 0) {
    if (options_.overlap_events || in_flight() == 0) submit_queued();
    COHORT_CHECK_KIND(kInternal, in_flight() > 0, "offload I/O: ticket ", ticket, " waits with nothing in flight");
    reap_one();
  }
  const std::string error = found->second.error;
  tickets_.erase(found);
  COHORT_CHECK_KIND(kIO, error.empty(), error);
}

void AsyncIo::wait_all() {
  std::exception_ptr first;
  while (!tickets_.empty()) {
    try {
      wait(tickets_.begin()->first);
    } catch (const Error&) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace cohort::detail
