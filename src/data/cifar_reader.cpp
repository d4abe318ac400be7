// CIFAR-10's binary batches: fixed-size records (label byte, then the R, G and B 32x32 planes), no
// header, so the file size alone says whether a file is whole. The file (a regular one only) is read
// at once into the buffer the returned tensors view. Also the synthetic CIFAR-shaped set the
// benchmarks use here, where no CIFAR-10 package exists.
#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cohort/cifar.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/file_read.h"

namespace cohort::data {
namespace {

constexpr const char* kWhereToGetIt =
    "get the binary version (cifar-10-binary.tar.gz) from https://www.cs.toronto.edu/~kriz/cifar.html "
    "and pass its unpacked cifar-10-batches-bin folder";

// A descriptor that closes itself.
struct OpenFile {
  int fd;
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
};

// The file opened as a regular one only (core/file_read.h: a fifo would block the open, a device be
// read without end); a missing one names where to get the data.
OpenFile open_cifar_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw Error("CIFAR-10 file not found: " + path + " (" + (error ? error.message() : std::strerror(ENOENT)) + "); " +
                    kWhereToGetIt,
                ErrorKind::kIO);
  }
  return OpenFile{detail::open_regular_file(path, "CIFAR-10 file " + path)};
}

// The first `bytes` bytes of the file as uint8 [bytes]: no more than its size said when opened.
torch::Tensor read_whole_file(int fd, const std::string& path, int64_t bytes) {
  auto data = torch::empty({bytes}, torch::kUInt8);
  auto* out = data.data_ptr<uint8_t>();
  int64_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(fd, out + got, size_t(bytes - got));
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, "cannot read CIFAR-10 file ", path, ": got ", got, " of its ", bytes, " bytes",
                      n < 0 ? std::string(": ") + std::strerror(errno) : std::string());
    got += n;
  }
  return data;
}

}  // namespace

Cifar10Batch load_cifar10_batch(const std::string& path, const Cifar10Options& options) {
  const OpenFile file = open_cifar_file(path);
  struct stat info {};
  COHORT_CHECK_KIND(kIO, ::fstat(file.fd, &info) == 0, "cannot read CIFAR-10 file ", path, ": ", std::strerror(errno));
  const int64_t bytes = int64_t(info.st_size), records = bytes / kCifar10RecordBytes;
  COHORT_CHECK_KIND(kIO, bytes > 0, "CIFAR-10 file ", path, " is empty");
  COHORT_CHECK_KIND(kIO, bytes % kCifar10RecordBytes == 0, "CIFAR-10 file ", path, " is truncated: ", bytes,
                    " bytes is not a whole number of ", kCifar10RecordBytes, "-byte records (", records,
                    " records and ", bytes % kCifar10RecordBytes, " bytes)");
  COHORT_CHECK_KIND(kIO, options.records_per_file() == 0 || records == options.records_per_file(), "CIFAR-10 file ",
                    path, " holds ", records, " records (", bytes, " bytes), expected ", options.records_per_file(),
                    " (", options.records_per_file() * kCifar10RecordBytes, " bytes): truncated?");
  const auto table = read_whole_file(file.fd, path, bytes).view({records, kCifar10RecordBytes});
  Cifar10Batch batch;
  batch.labels = table.select(1, 0).to(torch::kLong);
  batch.images = table.narrow(1, 1, kCifar10RecordBytes - 1).reshape({records, 3, 32, 32});
  const int64_t high = batch.labels.max().item<int64_t>();
  if (high > 9) {
    const int64_t record = batch.labels.gt(9).nonzero()[0][0].item<int64_t>();
    COHORT_CHECK_KIND(kIO, false, "CIFAR-10 file ", path, " has label ", batch.labels[record].item<int64_t>(),
                      " in record ", record, ", expected 0..9 (is it CIFAR-100's format, 2 label bytes per record?)");
  }
  return batch;
}

std::vector<std::string> cifar10_files(const std::string& dir, Split split) {
  const std::string base = (dir.empty() ? std::string(".") : dir) + "/";
  if (split == Split::kTest) return {base + "test_batch.bin"};
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) files.push_back(base + "data_batch_" + std::to_string(i) + ".bin");
  return files;
}

Cifar10 load_cifar10(const std::string& dir, Split split, const Cifar10Options& options) {
  std::vector<torch::Tensor> images, labels;
  for (const auto& path : cifar10_files(dir, split)) {
    auto batch = load_cifar10_batch(path, options);
    images.push_back(batch.images);
    labels.push_back(batch.labels);
  }
  Cifar10 out;
  const auto mean =
      torch::tensor({kCifar10Mean[0], kCifar10Mean[1], kCifar10Mean[2]}, torch::kFloat).view({1, 3, 1, 1});
  const auto spread = torch::tensor({kCifar10Std[0], kCifar10Std[1], kCifar10Std[2]}, torch::kFloat).view({1, 3, 1, 1});
  out.images = torch::cat(images).to(torch::kFloat).div_(255.0).sub_(mean).div_(spread);
  out.labels = torch::cat(labels);
  return out;
}

Cifar10 synthetic_cifar10(int64_t samples, uint64_t seed) {
  COHORT_CHECK_KIND(kInvalidArgument, samples >= 0, "synthetic_cifar10: samples must be at least 0, got ", samples);
  // A private generator: the set does not depend on (or disturb) the program's global seed.
  auto generator = at::detail::createCPUGenerator(seed);
  const auto patterns = torch::randn({10, 3, 32, 32}, generator);
  Cifar10 out;
  out.labels = torch::randint(0, 10, {samples}, generator, torch::kLong);
  out.images = patterns.index_select(0, out.labels) + torch::randn({samples, 3, 32, 32}, generator) * 2.0;
  out.synthetic = true;
  return out;
}

}  // namespace cohort::data
