// Fuzz target: a shard file's header and payload reads (ShardReader). The input is the whole file;
// the reader is asked for rank 1 of 2 with the payload the file's size implies, then for pieces whose
// offsets, lengths and checksums come from the input's first bytes, as a damaged manifest would give.
#include <cstdint>
#include <cstring>
#include <vector>

#include "checkpoint/shard_file.h"
#include "cohort/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cohort::detail::ckpt::kShardHeaderBytes;
  const cohort_fuzz::InputFile input(data, size, "shard.bin");  // removed when this returns
  const std::string& path = input.path();
  const int64_t payload = int64_t(size) > kShardHeaderBytes ? int64_t(size) - kShardHeaderBytes : 0;
  try {
    cohort::detail::ckpt::ShardReader reader(path, 1, 2, payload);
    int64_t asks[3] = {0, 0, 0};
    std::memcpy(asks, data, std::min(sizeof asks, size));
    cohort::detail::ckpt::Piece piece;
    piece.byte_offset = asks[0];
    piece.nbytes = asks[1] & 0xffff;  // a buffer the harness can hold; offsets stay unbounded
    piece.crc32 = uint32_t(asks[2]);
    std::vector<char> out(size_t(piece.nbytes) + 1);
    reader.read_piece(piece, out.data(), "fuzzed piece");
  } catch (const cohort::Error&) {
  }
  return 0;
}
