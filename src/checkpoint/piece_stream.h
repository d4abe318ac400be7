// Reading a checkpoint's tensors piece by piece, without loading a file or a tensor whole: the shard
// files a manifest names, opened once each, and each piece streamed through a fixed buffer with its
// CRC32 checked. cohort-ckpt's verify and consolidate read this way, and its export to PyTorch's DCP.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "core/check.h"

namespace cohort::detail::ckpt {

/// The size of the buffer stream_piece() reads through.
inline constexpr int64_t kPieceChunk = 4 << 20;

/// The shard files of one step directory, each opened (and its header checked) at its first use.
class PieceFiles {
 public:
  PieceFiles(std::string dir, const Manifest& m) : dir_(std::move(dir)), m_(m) {}
  /// Throws naming the manifest when `name` is not one of its files, or the file when it does not read.
  ShardReader& get(const std::string& name);

 private:
  std::string dir_;
  const Manifest& m_;
  std::map<std::string, std::unique_ptr<ShardReader>> open_;
};

/// The pieces of a tensor in the order they make the full tensor (a sharded one's checked to tile it:
/// no holes, no overlaps).
std::vector<Piece> ordered_pieces(const TensorRecord& r);

/// Streams one piece through `buffer` (kPieceChunk bytes), handing each chunk to `sink`, and checks its
/// CRC32: returns the text naming a checksum mismatch, "" when the bytes are the ones saved (a file that
/// cannot be read throws instead, so the caller tells a damaged piece from an unreadable file).
template <typename Sink>
std::string stream_piece(PieceFiles& files, const Piece& p, const std::string& name, std::vector<char>& buffer,
                         Sink&& sink) {
  ShardReader& reader = files.get(p.file);
  uint32_t crc = 0;
  for (int64_t done = 0; done < p.nbytes;) {
    const int64_t n = std::min<int64_t>(kPieceChunk, p.nbytes - done);
    reader.read_bytes(p.byte_offset + done, n, buffer.data());
    crc = crc32_update(crc, buffer.data(), n);
    sink(buffer.data(), n);
    done += n;
  }
  if (crc == p.crc32) return "";
  return str("checksum mismatch in ", reader.path(), " for tensor '", name, "' (bytes ", p.byte_offset, "..",
             p.byte_offset + p.nbytes, "): crc32 ", crc, ", the manifest says ", p.crc32);
}

}  // namespace cohort::detail::ckpt
