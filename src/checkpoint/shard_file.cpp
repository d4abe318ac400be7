// Shard files (see shard_file.h): written through core/safe_file.h, read with pread so short reads and
// errno are handled explicitly; CRC32 from zlib.
#include "checkpoint/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"
#include "core/check.h"
#include "core/safe_file.h"

namespace cohort::detail::ckpt {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'S', '1'};
constexpr uint32_t kShardVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t rank;
  uint32_t world_size;
  uint32_t reserved;
  int64_t payload_bytes;
};
static_assert(sizeof(Header) == kShardHeaderBytes, "shard header is 32 bytes");

std::string errno_text() { return std::strerror(errno); }

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, int64_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<int64_t>(bytes, 1 << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    bytes -= chunk;
  }
  return crc;
}

ShardWriter::ShardWriter(std::string path, int rank, int world_size)
    : path_(std::move(path)), rank_(rank), world_size_(world_size), file_(std::make_unique<SafeFile>(path_)) {
  const Header placeholder{};
  file_->write(&placeholder, sizeof placeholder);
}

ShardWriter::~ShardWriter() = default;

Piece ShardWriter::append(const torch::Tensor& tensor) {
  const torch::Tensor bytes = tensor.detach().to(torch::kCPU).contiguous();
  Piece piece;
  piece.rank = rank_;
  piece.byte_offset = payload_;
  piece.nbytes = static_cast<int64_t>(bytes.nbytes());
  piece.numel = bytes.numel();
  piece.crc32 = crc32_update(0, bytes.data_ptr(), piece.nbytes);
  file_->write(bytes.data_ptr(), bytes.nbytes());
  payload_ += piece.nbytes;
  return piece;
}

int64_t ShardWriter::finish() {
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kShardVersion;
  header.rank = static_cast<uint32_t>(rank_);
  header.world_size = static_cast<uint32_t>(world_size_);
  header.payload_bytes = payload_;
  file_->write_at(&header, sizeof header, 0);
  file_->commit();
  return payload_;
}

ShardReader::ShardReader(std::string path, int rank, int world_size, int64_t payload_bytes)
    : path_(std::move(path)), payload_(payload_bytes) {
  fd_ = open_own_file(path_, "shard file");
  try {
    check_header(rank, world_size);
  } catch (...) {  // a constructor that throws runs no destructor: the descriptor would leak
    ::close(fd_);
    throw;
  }
}

void ShardReader::check_header(int rank, int world_size) {
  const int64_t payload_bytes = payload_;
  struct stat info {};
  COHORT_CHECK_KIND(kIO, ::fstat(fd_, &info) == 0, "cannot stat ", path_, ": ", errno_text());
  const int64_t expected = kShardHeaderBytes + payload_bytes;
  COHORT_CHECK_KIND(kIO, info.st_size >= expected, "shard file ", path_, " is truncated: ", info.st_size,
                    " bytes, the manifest expects ", expected);
  COHORT_CHECK_KIND(kIO, info.st_size == expected, "shard file ", path_, " has ", info.st_size,
                    " bytes, the manifest expects ", expected);
  Header header{};
  COHORT_CHECK_KIND(kIO, ::pread(fd_, &header, sizeof header, 0) == sizeof header, "cannot read ", path_);
  COHORT_CHECK_KIND(kIO, std::memcmp(header.magic, kMagic, sizeof kMagic) == 0, "shard file ", path_,
                    " is not a cohort shard (bad magic number)");
  COHORT_CHECK_KIND(kIO, header.version == kShardVersion, "shard file ", path_, " is of shard format version ",
                    header.version, "; this cohort reads version ", kShardVersion,
                    header.version > kShardVersion ? " (a newer cohort wrote it?)" : " (damaged: no cohort wrote it)");
  COHORT_CHECK_KIND(kIO,
                    header.rank == static_cast<uint32_t>(rank) &&
                        header.world_size == static_cast<uint32_t>(world_size) && header.payload_bytes == payload_bytes,
                    "shard file ", path_,
                    " does not match the manifest (damaged, or another checkpoint's): its header says rank ",
                    header.rank, " of ", header.world_size, " with ", header.payload_bytes,
                    " payload bytes, the manifest expects rank ", rank, " of ", world_size, " with ", payload_bytes);
}

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardReader::read_bytes(int64_t byte_offset, int64_t nbytes, void* out) {
  // Compared without forming byte_offset + nbytes: a damaged manifest may give offsets near INT64_MAX.
  COHORT_CHECK_KIND(kIO, byte_offset >= 0 && nbytes >= 0 && byte_offset <= payload_ - nbytes, "shard file ", path_,
                    ": ", nbytes, " bytes at byte ", byte_offset, " lie outside its ", payload_, "-byte payload");
  char* p = static_cast<char*>(out);
  int64_t at = kShardHeaderBytes + byte_offset;
  while (nbytes > 0) {
    const ssize_t n = ::pread(fd_, p, static_cast<size_t>(nbytes), at);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, "shard file ", path_, " is truncated or unreadable at byte ", at);
    p += n;
    at += n;
    nbytes -= n;
  }
}

void ShardReader::read_piece(const Piece& piece, void* out, const std::string& what) {
  read_bytes(piece.byte_offset, piece.nbytes, out);
  const uint32_t crc = crc32_update(0, out, piece.nbytes);
  COHORT_CHECK_KIND(kIO, crc == piece.crc32, "checksum mismatch in ", path_, " for ", what, " (bytes ",
                    piece.byte_offset, "..", piece.byte_offset + piece.nbytes, "): crc32 ", crc, ", the manifest says ",
                    piece.crc32);
}

}  // namespace cohort::detail::ckpt
