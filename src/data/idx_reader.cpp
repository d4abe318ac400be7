// IDX reader: magic number, big-endian dimensions, then unsigned bytes, read through zlib's gzread
// (which also reads uncompressed files) from a regular file only (core/file_read.h). Data is read in
// chunks into a buffer the returned tensor owns, so a corrupt header declaring huge sizes fails on
// truncation instead of allocating it all up front, and no more is read than the header declares.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cohort/data.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/file_read.h"
#include "core/log.h"

namespace cohort::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr size_t kChunkBytes = size_t{1} << 22;

std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// A gzFile that closes itself; read() returns fewer bytes than asked only at the end of the data.
class GzFile {
 public:
  // A regular file only, opened without blocking: a fifo in the data directory blocked every rank
  // forever, and a device would be read without end.
  explicit GzFile(const std::string& path) : path_(path) {
    const int fd = detail::open_regular_file(path, "IDX file " + path);
    fd_ = fd;
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) ::close(fd);
    COHORT_CHECK_KIND(kIO, file_ != nullptr, "cannot read IDX file ", path, ": out of memory");
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  size_t read(void* destination, size_t size) {
    auto* out = static_cast<unsigned char*>(destination);
    size_t done = 0;
    while (done < size) {
      const unsigned ask = static_cast<unsigned>(std::min(size - done, kChunkBytes));
      const int got = gzread(file_, out + done, ask);
      if (got < 0) {
        int code = Z_OK;
        const char* message = gzerror(file_, &code);
        // Z_BUF_ERROR: the gzip stream ends early, i.e. the file is truncated; callers report it.
        if (code == Z_BUF_ERROR) break;
        // zlib's message starts with the name it opened: "<fd:3>: " (gzdopen) or "<path>: ".
        std::string text = message != nullptr ? message : "read error";
        for (const std::string& name : {"<fd:" + std::to_string(fd_) + ">", path_})
          if (text.rfind(name + ": ", 0) == 0) text.erase(0, name.size() + 2);
        COHORT_CHECK_KIND(kIO, false, "cannot read IDX file ", path_, ": ", text);
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  int fd_ = -1;  // zlib names the file by it
  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t big_endian(const unsigned char* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

// Reads an unsigned-byte IDX file with `expected_magic`: returns uint8 with the header's
// dimensions.
torch::Tensor load_idx(const std::string& path, uint32_t expected_magic, const char* what) {
  GzFile file(path);
  const size_t rank = expected_magic & 0xff;
  const size_t header_bytes = 4 * (1 + rank);
  unsigned char header[16] = {};
  const size_t got_header = file.read(header, header_bytes);
  COHORT_CHECK_KIND(kIO, got_header >= 4, "IDX file ", path, " is truncated: expected a ", header_bytes,
                    "-byte header, got ", got_header, " bytes");
  const uint32_t magic = big_endian(header);
  COHORT_CHECK_KIND(kIO, magic == expected_magic, "IDX file ", path, " has magic number ", hex(magic), ", expected ",
                    hex(expected_magic), " (", what, ")",
                    magic == kImagesMagic   ? "; it is an image file"
                    : magic == kLabelsMagic ? "; it is a label file"
                                            : "; it is not an unsigned-byte IDX file");
  COHORT_CHECK_KIND(kIO, got_header == header_bytes, "IDX file ", path, " is truncated: expected a ", header_bytes,
                    "-byte header, got ", got_header, " bytes");

  std::vector<int64_t> sizes;
  std::string shape;
  uint64_t data_bytes = 1;
  for (size_t d = 0; d < rank; ++d) {
    const uint32_t size = big_endian(header + 4 * (d + 1));
    sizes.push_back(size);
    shape += (d == 0 ? "" : "x") + std::to_string(size);
    COHORT_CHECK_KIND(kIO, size == 0 || data_bytes <= (uint64_t{1} << 40) / size, "IDX file ", path,
                      " declares an implausible shape ", shape, "...");
    data_bytes *= size;
  }

  // Read in chunks so the buffer grows only as far as the file really goes.
  auto buffer = std::make_unique<std::vector<uint8_t>>();
  size_t got = 0;
  while (got < data_bytes) {
    const size_t ask = static_cast<size_t>(std::min<uint64_t>(data_bytes - got, kChunkBytes));
    buffer->resize(got + ask);
    const size_t n = file.read(buffer->data() + got, ask);
    got += n;
    if (n < ask) break;
  }
  COHORT_CHECK_KIND(kIO, got == data_bytes, "IDX file ", path, " is truncated: expected ", header_bytes + data_bytes,
                    " bytes (", header_bytes, "-byte header + ", shape, " bytes), got ", header_bytes + got);
  unsigned char extra = 0;
  COHORT_CHECK_KIND(kIO, file.read(&extra, 1) == 0, "IDX file ", path, " holds more data than its header declares (",
                    shape, " = ", data_bytes, " bytes); is it the right file?");

  std::vector<uint8_t>* owned = buffer.release();
  return torch::from_blob(
      owned->data(), sizes, [owned](void*) { delete owned; }, torch::dtype(torch::kUInt8));
}

// The .gz file if its name is there, else the unpacked one; "" when neither is. A name that is there
// but leads nowhere (a link loop, a dangling link) is chosen all the same, so that reading it says why
// (it was "not found"); with both there, the choice is said.
std::string existing_variant(const std::string& gz_path) {
  const std::string plain = gz_path.substr(0, gz_path.size() - 3);
  std::error_code error;
  const bool gz = std::filesystem::exists(std::filesystem::symlink_status(gz_path, error));
  const bool raw = std::filesystem::exists(std::filesystem::symlink_status(plain, error));
  if (gz && raw) COHORT_WARN("both ", gz_path, " and ", plain, " are there: reading ", gz_path);
  return gz ? gz_path : raw ? plain : "";
}

}  // namespace

torch::Tensor load_idx_images(const std::string& path) {
  return load_idx(path, kImagesMagic, "unsigned-byte images, 3 dimensions");
}

torch::Tensor load_idx_labels(const std::string& path) {
  return load_idx(path, kLabelsMagic, "unsigned-byte labels, 1 dimension").to(torch::kLong);
}

std::string fashion_mnist_file(const std::string& dir, Split split, const std::string& kind) {
  COHORT_CHECK_KIND(kInvalidArgument, kind == "images" || kind == "labels",
                    "fashion_mnist_file: kind must be \"images\" or \"labels\", got \"", kind, "\"");
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string suffix = kind == "images" ? "-images-idx3-ubyte.gz" : "-labels-idx1-ubyte.gz";
  return (dir.empty() ? std::string(".") : dir) + "/" + prefix + suffix;
}

FashionMnist load_fashion_mnist(const std::string& dir, Split split) {
  std::string paths[2];
  const char* kinds[2] = {"images", "labels"};
  for (int i = 0; i < 2; ++i) {
    const std::string wanted = fashion_mnist_file(dir, split, kinds[i]);
    paths[i] = existing_variant(wanted);
    COHORT_CHECK_KIND(kIO, !paths[i].empty(), "Fashion-MNIST file not found: ", wanted,
                      " (install the Debian package dataset-fashion-mnist or pass --data DIR)");
  }
  const torch::Tensor images = load_idx_images(paths[0]);
  const torch::Tensor labels = load_idx_labels(paths[1]);
  COHORT_CHECK_KIND(kIO, images.size(1) == 28 && images.size(2) == 28, "Fashion-MNIST images in ", paths[0], " are ",
                    images.size(1), "x", images.size(2), ", expected 28x28");
  COHORT_CHECK_KIND(kIO, images.size(0) == labels.size(0), "Fashion-MNIST: ", paths[0], " has ", images.size(0),
                    " images but ", paths[1], " has ", labels.size(0), " labels");
  if (labels.numel() > 0) {
    const int64_t low = labels.min().item<int64_t>();
    const int64_t high = labels.max().item<int64_t>();
    COHORT_CHECK_KIND(kIO, low >= 0 && high <= 9, "Fashion-MNIST: ", paths[1], " has labels in ", low, "..", high,
                      ", expected 0..9");
  }
  FashionMnist out;
  out.images = images.to(torch::kFloat).div_(255.0).sub_(kFashionMnistMean).div_(kFashionMnistStd).unsqueeze(1);
  out.labels = labels;
  return out;
}

}  // namespace cohort::data
