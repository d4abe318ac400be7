// IDX / Fashion-MNIST reader tests: the real files of the Debian package dataset-fashion-mnist
// (counts, labels and pixel sums cross-checked against a numpy reading of the same .gz files), and
// every error on synthetic files in a temporary directory: missing, truncated, bad magic, trailing
// bytes, images/labels count mismatch, labels out of range. Missing real data fails, never skips.
// Also CIFAR-10's binary batches (include/cohort/cifar.h) on files written here (no CIFAR-10 package
// exists), their errors, and the synthetic CIFAR-shaped set.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cohort/cifar.h"
#include "cohort/data.h"
#include "cohort/error.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace idx_reader_test {

namespace {

namespace data = cohort::data;

using cohort::testing::error_of;

#define EXPECT_ERROR_HAS(body, text)                             \
  do {                                                           \
    const std::string message = error_of([&] { body; });     \
    EXPECT_NE(message.find(text), std::string::npos) << message; \
  } while (0)

// A gzip file of `bytes` in stored (uncompressed) deflate blocks: enough for zlib's gzread to
// decompress, written by hand because the test executables do not link zlib themselves.
std::vector<uint8_t> gzip_stored(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  auto put_le32 = [&](uint32_t v) {
    for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  size_t at = 0;
  do {
    const size_t len = std::min<size_t>(bytes.size() - at, 65535);
    const bool last = at + len == bytes.size();
    out.push_back(last ? 1 : 0);  // BFINAL, BTYPE 00 (stored), padded to the byte boundary
    out.push_back(static_cast<uint8_t>(len));
    out.push_back(static_cast<uint8_t>(len >> 8));
    out.push_back(static_cast<uint8_t>(~len));
    out.push_back(static_cast<uint8_t>(~len >> 8));
    out.insert(out.end(), bytes.begin() + at, bytes.begin() + at + len);
    at += len;
  } while (at < bytes.size());
  uint32_t crc = 0xffffffffu;
  for (uint8_t byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  put_le32(~crc);
  put_le32(static_cast<uint32_t>(bytes.size()));
  return out;
}

// Header + payload of an unsigned-byte IDX file.
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cohort_idx_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) {
    return write_plain(name, gzip_stored(bytes));
  }
  std::string write_plain(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  // A small valid Fashion-MNIST-shaped split: n images of 28x28 (pixel = index % 256), labels i
  // % 10.
  void write_split(const std::string& prefix, uint32_t images, uint32_t labels) {
    std::vector<uint8_t> pixels(images * 28 * 28);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i % 256);
    std::vector<uint8_t> ids(labels);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint8_t>(i % 10);
    write_gz(prefix + "-images-idx3-ubyte.gz", idx_bytes(0x803, {images, 28, 28}, pixels));
    write_gz(prefix + "-labels-idx1-ubyte.gz", idx_bytes(0x801, {labels}, ids));
  }

  std::string dir_;
};

TEST(FashionMnist, ReadsTheRealTrainingSet) {
  const std::string dir = data::kFashionMnistDir;
  ASSERT_TRUE(std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
      << "Fashion-MNIST not found in " << dir << ": apt-get install dataset-fashion-mnist";
  const auto raw = data::load_idx_images(dir + "/train-images-idx3-ubyte.gz");
  ASSERT_EQ(raw.sizes(), (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(raw.scalar_type(), torch::kUInt8);
  // Reference values from numpy reading the same gzip file.
  EXPECT_EQ(raw.to(torch::kLong).sum().item<int64_t>(), 3431114169LL);
  EXPECT_EQ(raw[0].to(torch::kLong).sum().item<int64_t>(), 76247);
  EXPECT_EQ(raw[0][14][12].item<int>(), 237);

  const auto train = data::load_fashion_mnist(dir, data::Split::kTrain);
  ASSERT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.images.scalar_type(), torch::kFloat);
  ASSERT_EQ(train.labels.sizes(), (std::vector<int64_t>{60000}));
  EXPECT_EQ(train.labels.scalar_type(), torch::kLong);
  const std::vector<int64_t> first(train.labels.data_ptr<int64_t>(),
                                   train.labels.data_ptr<int64_t>() + 12);
  EXPECT_EQ(first, (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}));
  EXPECT_EQ(train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(train.labels.max().item<int64_t>(), 9);
  EXPECT_TRUE(torch::equal(torch::bincount(train.labels), torch::full({10}, 6000, torch::kLong)));
  // The normalization constants are the training set's own statistics.
  EXPECT_NEAR(train.images.mean().item<double>(), 0.0, 1e-3);
  EXPECT_NEAR(train.images.std().item<double>(), 1.0, 1e-3);
  EXPECT_NEAR(train.images[0][0][14][12].item<double>(), (237 / 255.0 - 0.2860) / 0.3530, 1e-5);
}

TEST(FashionMnist, ReadsTheRealTestSet) {
  const auto test = data::load_fashion_mnist(data::kFashionMnistDir, data::Split::kTest);
  ASSERT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  ASSERT_EQ(test.labels.sizes(), (std::vector<int64_t>{10000}));
  const std::vector<int64_t> first(test.labels.data_ptr<int64_t>(),
                                   test.labels.data_ptr<int64_t>() + 12);
  EXPECT_EQ(first, (std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}));
  const auto raw =
      data::load_idx_images(std::string(data::kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(raw.to(torch::kLong).sum().item<int64_t>(), 573469082LL);
}

TEST_F(IdxFiles, ReadsSyntheticGzipAndPlainFiles) {
  write_split("train", 3, 3);
  const auto split = data::load_fashion_mnist(dir_, data::Split::kTrain);
  ASSERT_EQ(split.images.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(split.labels[2].item<int64_t>(), 2);
  EXPECT_NEAR(split.images[0][0][0][5].item<double>(), (5 / 255.0 - 0.2860) / 0.3530, 1e-6);

  // An unpacked file is read when the .gz is absent.
  const auto bytes = idx_bytes(0x803, {2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const auto images = data::load_idx_images(write_plain("plain-idx3-ubyte", bytes));
  ASSERT_EQ(images.sizes(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(images[1][1][2].item<int>(), 12);
  write_plain("t10k-images-idx3-ubyte",
              idx_bytes(0x803, {1, 28, 28}, std::vector<uint8_t>(784, 7)));
  write_plain("t10k-labels-idx1-ubyte", idx_bytes(0x801, {1}, {4}));
  EXPECT_EQ(data::load_fashion_mnist(dir_, data::Split::kTest).labels[0].item<int64_t>(), 4);

  const auto empty = data::load_idx_labels(write_gz("empty.gz", idx_bytes(0x801, {0}, {})));
  EXPECT_EQ(empty.numel(), 0);
}

TEST_F(IdxFiles, MissingFileNamesThePathAndThePackage) {
  const std::string wanted = dir_ + "/train-images-idx3-ubyte.gz";
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTrain),
                   "Fashion-MNIST file not found: " + wanted);
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTrain),
                   "install the Debian package dataset-fashion-mnist or pass --data DIR");
  EXPECT_ERROR_HAS(data::load_idx_labels(dir_ + "/nope.gz"),
                   "IDX file " + dir_ + "/nope.gz: cannot open: No such file or directory");
}

// Hostile pass 3, D8: a link loop at a data file was "not found" under the .gz name; it is named, with
// the reason.
TEST_F(IdxFiles, ALinkLoopIsNamedWithWhy) {
  write_split("t10k", 1, 1);
  const std::string images = dir_ + "/t10k-images-idx3-ubyte.gz";
  std::filesystem::remove(images);
  ASSERT_EQ(::symlink(images.c_str(), images.c_str()), 0);
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTest),
                   "IDX file " + images + ": cannot open: Too many levels of symbolic links");
}

// Probe D10: a fifo in the data directory blocked every rank in open() forever.
TEST_F(IdxFiles, FifoOrDeviceIsRefusedWithoutBlocking) {
  write_split("t10k", 1, 1);
  const std::string labels = dir_ + "/t10k-labels-idx1-ubyte.gz";
  std::filesystem::remove(labels);
  ASSERT_EQ(mkfifo(labels.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { data::load_fashion_mnist(dir_, data::Split::kTest); }),
            "IDX file " + labels + ": it is a fifo, not a regular file");
  EXPECT_EQ(error_of([] { data::load_idx_images("/dev/zero"); }),
            "IDX file /dev/zero: it is a character device, not a regular file");
  EXPECT_EQ(error_of([&] { data::load_idx_images(dir_); }),
            "IDX file " + dir_ + ": it is a directory, not a regular file");
}

TEST_F(IdxFiles, TruncatedFileSaysExpectedAndGotBytes) {
  auto bytes = idx_bytes(0x803, {2, 28, 28}, std::vector<uint8_t>(2 * 784, 1));
  bytes.resize(16 + 1000);
  const std::string path = write_gz("short.gz", bytes);
  EXPECT_ERROR_HAS(data::load_idx_images(path), path + " is truncated: expected 1584 bytes");
  EXPECT_ERROR_HAS(data::load_idx_images(path), "got 1016");

  // A gzip stream cut in the middle (as by an interrupted download).
  const std::string whole =
      write_gz("whole.gz", idx_bytes(0x801, {5000}, std::vector<uint8_t>(5000, 3)));
  std::vector<char> compressed(std::filesystem::file_size(whole));
  std::ifstream(whole, std::ios::binary)
      .read(compressed.data(), static_cast<std::streamsize>(compressed.size()));
  const std::string cut = dir_ + "/cut.gz";
  std::ofstream(cut, std::ios::binary)
      .write(compressed.data(), static_cast<std::streamsize>(compressed.size() / 2));
  EXPECT_ERROR_HAS(data::load_idx_labels(cut), "is truncated");

  EXPECT_ERROR_HAS(data::load_idx_labels(write_gz("tiny.gz", {0, 0})),
                   "expected a 8-byte header, got 2");
  EXPECT_ERROR_HAS(data::load_idx_labels(write_gz("trail.gz", idx_bytes(0x801, {2}, {1, 2, 3}))),
                   "holds more data than its header declares");
}

TEST_F(IdxFiles, WrongMagicNumber) {
  const std::string labels = write_gz("labels.gz", idx_bytes(0x801, {3}, {1, 2, 3}));
  EXPECT_ERROR_HAS(data::load_idx_images(labels),
                   labels + " has magic number 0x00000801, expected 0x00000803");
  EXPECT_ERROR_HAS(data::load_idx_images(labels), "it is a label file");
  const std::string text = write_plain("readme.txt", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r'});
  EXPECT_ERROR_HAS(data::load_idx_labels(text), "it is not an unsigned-byte IDX file");
  // A gzip header followed by an invalid deflate block (type 11): zlib's own message is passed on.
  const std::string corrupt =
      write_plain("corrupt.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0x07, 1, 2});
  EXPECT_ERROR_HAS(data::load_idx_labels(corrupt), "cannot read IDX file " + corrupt + ": invalid");
}

TEST_F(IdxFiles, ImagesAndLabelsMustAgree) {
  write_split("train", 4, 3);
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTrain), "has 4 images but");
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTrain), "has 3 labels");

  write_gz("t10k-images-idx3-ubyte.gz", idx_bytes(0x803, {1, 28, 28}, std::vector<uint8_t>(784)));
  write_gz("t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {1}, {12}));
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTest),
                   "labels in 12..12, expected 0..9");
  write_gz("t10k-images-idx3-ubyte.gz", idx_bytes(0x803, {1, 2, 2}, {0, 0, 0, 0}));
  EXPECT_ERROR_HAS(data::load_fashion_mnist(dir_, data::Split::kTest), "are 2x2, expected 28x28");
}

// ---- CIFAR-10 ----

// `n` records: label (first_label + i) % 10, pixel p of record i = (i * 7 + p) % 256.
std::vector<uint8_t> cifar_records(int n, int first_label = 0) {
  std::vector<uint8_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(static_cast<uint8_t>((first_label + i) % 10));
    for (int p = 0; p < 3072; ++p) out.push_back(static_cast<uint8_t>((i * 7 + p) % 256));
  }
  return out;
}

class CifarFiles : public IdxFiles {};

TEST_F(CifarFiles, ReadsRecordsAsPlanesOfRedGreenBlue) {
  const auto path = write_plain("test_batch.bin", cifar_records(3, 4));
  const auto batch = data::load_cifar10_batch(path, data::Cifar10Options().records_per_file(0));
  ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{3, 3, 32, 32}));
  EXPECT_EQ(batch.images.dtype(), torch::kUInt8);
  EXPECT_TRUE(batch.labels.equal(torch::tensor({4, 5, 6}, torch::kLong)));
  // Record 2, green plane (bytes 1024..2047), row 1, column 5: pixel 1024 + 32 + 5.
  EXPECT_EQ(batch.images[2][1][1][5].item<int>(), (2 * 7 + 1024 + 32 + 5) % 256);
}

TEST_F(CifarFiles, LoadsASplitNormalizedPerChannel) {
  for (int i = 1; i <= 5; ++i) write_plain("data_batch_" + std::to_string(i) + ".bin", cifar_records(2, i));
  write_plain("test_batch.bin", cifar_records(2));
  const auto train = data::load_cifar10(dir_, data::Split::kTrain, data::Cifar10Options().records_per_file(2));
  ASSERT_EQ(train.images.sizes(), (std::vector<int64_t>{10, 3, 32, 32}));
  EXPECT_FALSE(train.synthetic);
  EXPECT_EQ(train.labels[2].item<int64_t>(), 2);  // data_batch_2's first record
  // Set record 2 is data_batch_2's record 0 (red pixel 0: byte 0); set record 1 is data_batch_1's record 1.
  EXPECT_NEAR(train.images[2][0][0][0].item<double>(), (0 / 255.0 - data::kCifar10Mean[0]) / data::kCifar10Std[0], 1e-5);
  EXPECT_NEAR(train.images[1][2][0][0].item<double>(), ((7 + 2048) % 256 / 255.0 - data::kCifar10Mean[2]) / data::kCifar10Std[2],
              1e-5);
  const auto test = data::load_cifar10(dir_, data::Split::kTest, data::Cifar10Options().records_per_file(2));
  EXPECT_EQ(test.images.size(0), 2);
}

TEST_F(CifarFiles, MissingFileNamesItAndWhereToGetTheData) {
  EXPECT_ERROR_HAS(data::load_cifar10(dir_, data::Split::kTest),
                   "CIFAR-10 file not found: " + dir_ + "/test_batch.bin (No such file or directory); get the binary "
                   "version (cifar-10-binary.tar.gz) from https://www.cs.toronto.edu/~kriz/cifar.html");
  write_plain("data_batch_1.bin", cifar_records(1));
  EXPECT_ERROR_HAS(data::load_cifar10(dir_, data::Split::kTrain, data::Cifar10Options().records_per_file(1)),
                   "CIFAR-10 file not found: " + dir_ + "/data_batch_2.bin");
}

TEST_F(CifarFiles, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/test_batch.bin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { data::load_cifar10(dir_, data::Split::kTest); }),
            "CIFAR-10 file " + fifo + ": it is a fifo, not a regular file");
}

TEST_F(CifarFiles, TruncatedFileSaysItsSizeAndTheRecordSize) {
  auto bytes = cifar_records(2);
  bytes.resize(bytes.size() - 100);
  const auto cut = write_plain("cut.bin", bytes);
  EXPECT_ERROR_HAS(data::load_cifar10_batch(cut), "CIFAR-10 file " + cut + " is truncated: 6046 bytes is not a whole "
                   "number of 3073-byte records (1 records and 2973 bytes)");
  // Cut at a record boundary: only the count the release has (10000) tells.
  const auto short_file = write_plain("short.bin", cifar_records(2));
  EXPECT_ERROR_HAS(data::load_cifar10_batch(short_file), "CIFAR-10 file " + short_file + " holds 2 records (6146 "
                   "bytes), expected 10000 (30730000 bytes): truncated?");
  EXPECT_ERROR_HAS(data::load_cifar10_batch(write_plain("empty.bin", {})), "empty.bin is empty");
}

TEST_F(CifarFiles, LabelOutsideTheTenClassesNamesTheRecord) {
  auto bytes = cifar_records(3);
  bytes[2 * 3073] = 57;
  const auto bad = write_plain("bad.bin", bytes);
  EXPECT_ERROR_HAS(data::load_cifar10_batch(bad, data::Cifar10Options().records_per_file(0)),
                   "CIFAR-10 file " + bad + " has label 57 in record 2, expected 0..9");
}

TEST(SyntheticCifar, IsLabelledSyntheticShapedLikeCifarAndRepeatable) {
  const auto a = data::synthetic_cifar10(64, 3), b = data::synthetic_cifar10(64, 3), c = data::synthetic_cifar10(64, 4);
  EXPECT_TRUE(a.synthetic);
  EXPECT_EQ(a.images.sizes(), (std::vector<int64_t>{64, 3, 32, 32}));
  EXPECT_EQ(a.images.dtype(), torch::kFloat);
  EXPECT_GE(a.labels.min().item<int64_t>(), 0);
  EXPECT_LE(a.labels.max().item<int64_t>(), 9);
  EXPECT_TRUE(a.images.equal(b.images) && a.labels.equal(b.labels));
  EXPECT_FALSE(a.images.equal(c.images));
  // Learnable: images of one class are nearer each other than to another class's.
  const auto same = a.labels == a.labels[0];
  const auto other = a.labels != a.labels[0];
  ASSERT_GT(same.sum().item<int64_t>(), 1);
  const auto first = a.images[0].flatten();
  const auto distance = (a.images.flatten(1) - first).norm(2, 1);
  EXPECT_LT(distance.index({same}).sum().item<double>() / (same.sum().item<double>() - 1),
            distance.index({other}).mean().item<double>());
  EXPECT_ERROR_HAS(data::synthetic_cifar10(-1), "synthetic_cifar10: samples must be at least 0, got -1");
}

}  // namespace

}  // namespace idx_reader_test
