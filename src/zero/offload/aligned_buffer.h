// Host memory for direct I/O: O_DIRECT reads and writes need the buffer, the file offset and the
// length aligned to the device's logical block; 4096 bytes covers every disk and NVMe drive in use.
#pragma once

#include <cstdint>
#include <cstdlib>
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

/// An uninitialised block of host memory aligned for direct I/O, freed with the object.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// `bytes` rounded up to the alignment; a failure is an Error of kind out-of-memory naming the size.
  explicit AlignedBuffer(int64_t bytes) : bytes_(round_up_to_alignment(bytes)) {
    const int failed = bytes_ > 0 ? posix_memalign(&data_, kDirectIoAlignment, size_t(bytes_)) : 0;
    COHORT_CHECK_KIND(kOutOfMemory, failed == 0, "could not allocate ", bytes_,
                      " bytes of host memory for direct I/O (", std::strerror(failed), ")");
  }
  ~AlignedBuffer() { std::free(data_); }
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
