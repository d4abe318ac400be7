// The data of a DCP directory: its items read whole (a tensor chunk as a tensor, an object as its
// pickled value), each from the byte range its .metadata gives, in the file it names (a plain name
// inside the directory: metadata.cpp refuses others). A tensor is assembled from its chunks.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "checkpoint/dcp/metadata.h"
#include "checkpoint/dcp/pickle_value.h"

namespace cohort::detail::dcp {

class DcpFiles {
 public:
  explicit DcpFiles(std::string dir) : dir_(std::move(dir)) {}
  ~DcpFiles();
  DcpFiles(const DcpFiles&) = delete;
  DcpFiles& operator=(const DcpFiles&) = delete;

  /// The whole tensor of a tensor entry, in `dtype`, its chunks checked to tile it.
  torch::Tensor tensor(const DcpEntry& entry, c10::ScalarType dtype);
  /// The object of a bytes entry.
  PickleValue object(const DcpEntry& entry);

 private:
  std::string item(const DcpChunk& chunk, const std::string& fqn);
  int descriptor(const std::string& file);

  std::string dir_;
  std::map<std::string, std::pair<int, int64_t>> open_;  // file name -> descriptor, size
};

}  // namespace cohort::detail::dcp
