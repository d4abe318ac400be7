// Reads a safetensors file (what cohort-ckpt consolidate writes) into tensors by name: an 8-byte
// little-endian header length, a JSON header of dtype, shape and data_offsets, then the bytes.
#pragma once

#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace cohort::testing {

/// The float32, float64 and int64 tensors (others, such as RNG states, are left out).
inline std::map<std::string, torch::Tensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(static_cast<unsigned char>(in.get())) << (8 * i);
  std::string header(length, ' ');
  in.read(header.data(), static_cast<std::streamsize>(length));
  const std::map<std::string, torch::Dtype> dtypes = {{"F32", torch::kFloat}, {"F64", torch::kDouble},
                                                      {"I64", torch::kLong}};
  std::map<std::string, torch::Tensor> out;
  const auto parsed = nlohmann::json::parse(header);  // items() refers to it: it must outlive the loop
  for (const auto& [name, entry] : parsed.items()) {
    if (name == "__metadata__" || !dtypes.count(entry["dtype"])) continue;
    const auto shape = entry["shape"].get<std::vector<int64_t>>();
    const int64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    auto tensor = torch::empty(shape, dtypes.at(entry["dtype"]));
    if (tensor.nbytes() != size_t(end - begin))
      throw std::runtime_error(path + ": tensor '" + name + "' has " + std::to_string(end - begin) + " bytes for " +
                               std::to_string(tensor.nbytes()));
    in.seekg(static_cast<std::streamoff>(8 + length + begin));
    in.read(static_cast<char*>(tensor.data_ptr()), end - begin);
    out[name] = tensor;
  }
  return out;
}

}  // namespace cohort::testing
