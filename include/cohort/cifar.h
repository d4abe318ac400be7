// CIFAR-10 as LibTorch tensors: the standard binary batches (cifar-10-batches-bin: data_batch_1..5.bin,
// test_batch.bin; each record one label byte and 3072 pixel bytes, the red, green and blue 32x32
// planes), and a synthetic CIFAR-shaped set for benchmarks on machines without the data. Every failure
// (missing file, truncated file, label outside 0..9) is a one-line cohort::Error naming the file.
// Public (owned by data, src/layers.txt): training programs and the benchmarks' CIFAR runs load it.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/data.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort::data {

/// Bytes of one record: the label, then 3 x 32 x 32 pixels.
inline constexpr int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;
/// Records in each file of the official release.
inline constexpr int64_t kCifar10RecordsPerFile = 10000;
/// Per-channel mean and standard deviation of the training pixels scaled to [0, 1].
inline constexpr std::array<double, 3> kCifar10Mean = {0.4914, 0.4822, 0.4465};
inline constexpr std::array<double, 3> kCifar10Std = {0.2470, 0.2435, 0.2616};

/// One split of CIFAR-10 (or the synthetic stand-in), ready for a model.
struct Cifar10 {
  torch::Tensor images;  ///< float32 [N, 3, 32, 32], per channel (pixel / 255 - mean) / std
  torch::Tensor labels;  ///< int64 [N], class ids 0..9
  /// True for synthetic_cifar10(): random images, not CIFAR-10. Benchmarks print it.
  bool synthetic = false;
};

/// One binary batch file as stored.
struct Cifar10Batch {
  torch::Tensor images;  ///< uint8 [N, 3, 32, 32]
  torch::Tensor labels;  ///< int64 [N], class ids 0..9
};

struct Cifar10Options {
  /// Records every file must hold (the release: 10000, so a file cut at a record boundary is caught);
  /// 0 accepts any whole number of records.
  TORCH_ARG(int64_t, records_per_file) = kCifar10RecordsPerFile;
};

/// Reads one binary batch file. Throws cohort::Error
/// when the file is missing, empty, not a whole number of records (naming its size), holds another
/// number of records than options.records_per_file(), or has a label outside 0..9.
Cifar10Batch load_cifar10_batch(const std::string& path, const Cifar10Options& options = {});

/// The files of a split in `dir`: data_batch_1.bin .. data_batch_5.bin, or test_batch.bin.
std::vector<std::string> cifar10_files(const std::string& dir, Split split);

/// Loads a split from `dir` (the unpacked cifar-10-batches-bin folder), normalized with kCifar10Mean
/// and kCifar10Std. Errors as load_cifar10_batch; a missing file's error says where to get the data.
Cifar10 load_cifar10(const std::string& dir, Split split = Split::kTrain, const Cifar10Options& options = {});

/// A synthetic CIFAR-shaped set (NOT CIFAR-10; `synthetic` is true): `samples` images of 3x32x32 whose
/// class decides a fixed random pattern plus noise, so a model's loss falls on it, with labels 0..9.
/// The same seed gives the same set on every rank.
Cifar10 synthetic_cifar10(int64_t samples, uint64_t seed = 0);

}  // namespace cohort::data
COHORT_EXPORT_END
