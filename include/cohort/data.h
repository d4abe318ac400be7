// IDX files (the MNIST/Fashion-MNIST format) and the Fashion-MNIST dataset as LibTorch tensors.
// Files may be gzip-compressed or plain (read with zlib either way); every failure (missing file,
// truncated data, wrong magic number, images/labels disagreeing) is a one-line cohort::Error naming
// the path. Public (owned by data, src/layers.txt): a training program loads its dataset with it, as
// the examples and cohort::Trainer's data modules do.
#pragma once

#include <torch/types.h>

#include <string>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort::data {

/// Where the Debian package dataset-fashion-mnist installs the four files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
/// Mean and standard deviation of the training pixels scaled to [0, 1] (0.28604, 0.35302).
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

/// Which half of the dataset: train-*-ubyte (60000 samples) or t10k-*-ubyte (10000 samples).
enum class Split { kTrain, kTest };

/// One split of Fashion-MNIST, ready for a model.
struct FashionMnist {
  torch::Tensor images;  ///< float32 [N, 1, 28, 28], (pixel / 255 - kFashionMnistMean) / kFashionMnistStd
  torch::Tensor labels;  ///< int64 [N], class ids 0..9
};

/// Reads an IDX3 unsigned-byte image file (magic 0x00000803): uint8 [N, rows, cols].
/// Throws cohort::Error when the file cannot be opened, has another magic number, is truncated or
/// holds more bytes than its header declares.
torch::Tensor load_idx_images(const std::string& path);

/// Reads an IDX1 unsigned-byte label file (magic 0x00000801): int64 [N]. Errors as load_idx_images.
torch::Tensor load_idx_labels(const std::string& path);

/// Path of a Fashion-MNIST file in `dir`: "<dir>/train-images-idx3-ubyte.gz" and the like.
/// `kind` is "images" or "labels".
std::string fashion_mnist_file(const std::string& dir, Split split, const std::string& kind);

/// Loads one split from `dir` (default kFashionMnistDir; "<name>.gz" or else the unpacked
/// "<name>"), normalized. Throws cohort::Error naming the path and how to get the data when a file
/// is missing, and when images are not 28x28, counts of images and labels differ, or a label is
/// outside 0..9.
FashionMnist load_fashion_mnist(const std::string& dir = kFashionMnistDir, Split split = Split::kTrain);

}  // namespace cohort::data
COHORT_EXPORT_END
