// Writing safetensors files (safetensors_writer.h) and cohort::save_safetensors (cohort/safetensors.h).
#include "checkpoint/safetensors_writer.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "cohort/safetensors.h"
#include "core/check.h"

namespace cohort {
namespace detail {

const char* safetensors_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Double: return "F64";
    case c10::ScalarType::Float: return "F32";
    case c10::ScalarType::Half: return "F16";
    case c10::ScalarType::BFloat16: return "BF16";
    case c10::ScalarType::Long: return "I64";
    case c10::ScalarType::Int: return "I32";
    case c10::ScalarType::Short: return "I16";
    case c10::ScalarType::Char: return "I8";
    case c10::ScalarType::Byte: return "U8";
    case c10::ScalarType::Bool: return "BOOL";
    default:
      throw Error(std::string("safetensors has no type for ") + c10::toString(type), ErrorKind::kInvalidArgument);
  }
}

void write_safetensors_header(SafeFile& file, const nlohmann::json& header) {
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);  // LE
  file.write(length, sizeof length);
  file.write(text);
}

}  // namespace detail

// Little-endian machines only write the bytes as they are in memory (x86-64 and aarch64 Linux).
void save_safetensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    COHORT_CHECK_KIND(kInvalidArgument, !name.empty() && name != "__metadata__", "save_safetensors(", path, "): '",
                      name, "' is not a tensor name");
    COHORT_CHECK_KIND(kInvalidArgument, tensor.defined(), "save_safetensors(", path, "): tensor '", name,
                      "' is undefined");
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    header[name] = {{"dtype", detail::safetensors_dtype(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  detail::SafeFile file(path);  // a failure leaves neither `path` changed nor a temporary behind
  detail::write_safetensors_header(file, header);
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor host = tensor.detach().to(torch::kCPU).contiguous();
    file.write(host.data_ptr(), static_cast<size_t>(host.nbytes()));
  }
  file.commit();
}

}  // namespace cohort
