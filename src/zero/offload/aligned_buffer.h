// Host memory for direct I/O: O_DIRECT reads and writes need the buffer, the file offset and the
// length aligned to the device's logical block; 4096 bytes covers every disk and NVMe drive in use.
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {

constexpr int64_t kDirectIoAlignment = 4096;

/// `bytes` rounded up to a multiple of kDirectIoAlignment.
inline int64_t round_up_to_alignment(int64_t bytes) {
  return (bytes + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

/// An uninitialised block of host memory aligned for direct I/O, freed with the object. Mapped
/// from the kernel, never taken from malloc's heap: under cohort's malloc policy (freed blocks stay
/// in the heap) the swappers' unit-sized buffers, freed and made again, were split by the forward's
/// small allocations and the heap grew with every unit (measured: a 24-block GPT with both offloads
/// on NVMe peaked at 2516 MiB a rank, 1706 MiB with the policy off).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// `bytes` rounded up to the alignment; a failure is an Error of kind out-of-memory naming the size.
  explicit AlignedBuffer(int64_t bytes) : bytes_(round_up_to_alignment(bytes)) {
    if (bytes_ == 0) return;
    void* mapped = ::mmap(nullptr, size_t(bytes_), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    COHORT_CHECK_KIND(kOutOfMemory, mapped != MAP_FAILED, "could not allocate ", bytes_,
                      " bytes of host memory for direct I/O (", std::strerror(errno), ")");
    data_ = mapped;
  }
  ~AlignedBuffer() {
    if (data_ != nullptr) ::munmap(data_, size_t(bytes_));
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace cohort::detail
