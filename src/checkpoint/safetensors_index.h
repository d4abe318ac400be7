// What a safetensors file holds, from its header alone (no tensor is read): for tools that count a
// model's parameters (cohort-plan) or look at a consolidated checkpoint. The header is validated as
// cohort::load_safetensors validates it (cohort/safetensors.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cohort::detail {

struct SafetensorsIndex {
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::string dtype;           ///< the format's name: "F32", "BF16", ...
    int64_t begin = 0, end = 0;  ///< its bytes in the data section
  };
  std::vector<Tensor> tensors;
  int64_t data_start = 0;                       ///< the data section's first byte in the file
  std::map<std::string, std::string> metadata;  ///< __metadata__ ("format": "cohort-checkpoint consolidated")
};

/// True when `bytes` (a file's first `size` bytes, or all of them) begin as a safetensors file does: an
/// 8-byte little-endian header length within the file, then '{'.
bool looks_like_safetensors(const char* bytes, size_t size);

/// The header of the safetensors file at `path`; throws cohort::Error naming the file as load_safetensors does.
SafetensorsIndex read_safetensors_index(const std::string& path);

}  // namespace cohort::detail
