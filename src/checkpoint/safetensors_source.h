// Pretrained weights read in pieces: a safetensors file, or a Hugging Face sharded set (the
// `model.safetensors.index.json` whose weight_map names the file beside it that holds each tensor),
// each tensor's elements read on demand by range, straight from the file (pread), so a rank that keeps
// a shard reads that shard's bytes only. Every header and the index are validated, bounded, before
// any tensor is read (cohort::load_pretrained).
#pragma once

#include <torch/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/safetensors_index.h"

namespace cohort::detail {

/// The torch dtype of the format's dtype name ("BF16"), nothing for an unknown one.
std::optional<torch::Dtype> dtype_of_safetensors(const std::string& name);

class SafetensorsSource {
 public:
  /// `path`: a .safetensors file, or an index (a JSON file: {"weight_map": {name: file}}) whose files
  /// are plain names in its own directory. Throws cohort::Error naming the file and what is wrong.
  explicit SafetensorsSource(const std::string& path);
  ~SafetensorsSource();
  SafetensorsSource(const SafetensorsSource&) = delete;
  SafetensorsSource& operator=(const SafetensorsSource&) = delete;

  /// Every tensor's name, sorted.
  std::vector<std::string> names() const;
  /// The shape the file gives tensor `name` (which must be there).
  const std::vector<int64_t>& shape(const std::string& name) const { return tensors_.at(name).tensor.shape; }
  /// Elements [begin, begin + out.numel()) of tensor `name` flattened, into `out` (1-D, CPU,
  /// contiguous; converted to its dtype). Refused naming both when the tensor is missing or its shape
  /// is not `shape`, or the range goes past its end.
  void read(const std::string& name, const std::vector<int64_t>& shape, int64_t begin, torch::Tensor out) const;
  /// A file's __metadata__; an index's "metadata" (its string values; Hugging Face's total_size is a number).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// "model.safetensors" or "model.safetensors.index.json": what errors name.
  const std::string& path() const { return path_; }

 private:
  struct Located {
    size_t file = 0;  ///< into files_
    SafetensorsIndex::Tensor tensor;
    torch::Dtype dtype = torch::kFloat;
  };
  struct File {
    std::string path;
    int fd = -1;
    int64_t data_start = 0;
  };
  void add_file(const std::string& path, const std::vector<std::string>* only);
  void read_index(const std::string& path);

  std::string path_;
  std::vector<File> files_;
  std::map<std::string, Located> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace cohort::detail
