// One rank's shard file: a 32-byte header (magic "COHORTS1", format version, rank, world size,
// payload bytes) then the raw bytes of its tensors, back to back. The header lets a shard be checked
// on its own (whose is it, is it complete); where each tensor lies and its CRC32 are in the manifest.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "checkpoint/manifest.h"

namespace cohort::detail {
class SafeFile;
}

namespace cohort::detail::ckpt {

inline constexpr int64_t kShardHeaderBytes = 32;

/// Writes a shard: append() each tensor, then finish() (header, fsync, rename into place: a safe write,
/// core/safe_file.h). Throws cohort::Error naming the path when the disk refuses; a shard never
/// finished leaves no file.
class ShardWriter {
 public:
  ShardWriter(std::string path, int rank, int world_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  /// Appends the bytes of `tensor` (copied to a contiguous CPU tensor) and returns where they lie.
  Piece append(const torch::Tensor& tensor);
  /// Total payload bytes; call once, after the last append.
  int64_t finish();

 private:
  std::string path_;
  int rank_, world_size_;
  std::unique_ptr<SafeFile> file_;
  int64_t payload_ = 0;
};

/// Reads pieces of a shard written by ShardWriter; the constructor checks the header against what
/// the manifest expects (rank, world size, payload bytes), so a truncated file is found at once. The
/// file is opened with O_NOFOLLOW and must be a regular file (core/safe_file.h: open_own_file).
class ShardReader {
 public:
  ShardReader(std::string path, int rank, int world_size, int64_t payload_bytes);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  /// Reads `piece` into `out` (nbytes) and checks its CRC32; `what` names it in errors.
  void read_piece(const Piece& piece, void* out, const std::string& what);
  /// Reads any byte range of the payload, no checksum (streaming consumers check it themselves).
  void read_bytes(int64_t byte_offset, int64_t nbytes, void* out);
  const std::string& path() const { return path_; }

 private:
  void check_header(int rank, int world_size);  // size, magic, rank, world size and payload

  std::string path_;
  int fd_ = -1;
  int64_t payload_ = 0;
};

/// CRC32 (zlib) continued from `crc` over `bytes` bytes.
uint32_t crc32_update(uint32_t crc, const void* data, int64_t bytes);

}  // namespace cohort::detail::ckpt
