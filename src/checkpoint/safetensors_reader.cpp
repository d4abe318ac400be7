// cohort::load_safetensors and cohort::load_state_dict (cohort/safetensors.h). The header (8-byte
// little-endian length, then JSON) is bounded in size and depth as Python's safetensors bounds it, names
// are unique, and every entry is validated against the file's size before a tensor is allocated, so a
// truncated or hostile file is a one-line error, never a huge allocation or a read past the end. Each
// tensor is read straight into its own storage.
#include "cohort/safetensors.h"

#include <torch/torch.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "checkpoint/safetensors_index.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/file_read.h"
#include "core/json_read.h"
#include "core/text.h"

namespace cohort {
namespace detail {

std::optional<torch::Dtype> dtype_of_safetensors(const std::string& name) {
  static const std::map<std::string, torch::Dtype> kTypes = {
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
      {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
      {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};
  const auto it = kTypes.find(name);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

}  // namespace detail
namespace {

using detail::excerpt;
using detail::json_excerpt;

// One tensor's entry of the header, validated: its dtype, shape and byte range in the data section.
struct Entry {
  std::string name;
  torch::Dtype dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
  std::string type;  ///< the format's name of dtype
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j, int64_t data_bytes) {
  const std::string where = path + ": tensor '" + excerpt(name) + "'";
  COHORT_CHECK_KIND(kInvalidArgument,
                    j.is_object() && j.contains("dtype") && j.contains("shape") && j.contains("data_offsets"), where,
                    " is not an object with dtype, shape and data_offsets");
  COHORT_CHECK_KIND(kInvalidArgument, j["dtype"].is_string(), where, " has a dtype that is not a string");
  const std::string type = j["dtype"].get<std::string>();
  const auto dtype = detail::dtype_of_safetensors(type);
  COHORT_CHECK_KIND(kInvalidArgument, dtype.has_value(), where, " has dtype \"", excerpt(type),
                    "\" (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  Entry e{name, *dtype, {}, 0, 0, type};
  COHORT_CHECK_KIND(kInvalidArgument, j["shape"].is_array(), where, " has a shape that is not a list");
  int64_t numel = 1;
  for (const auto& size : j["shape"]) {
    COHORT_CHECK_KIND(kInvalidArgument, size.is_number_integer() && size.get<int64_t>() >= 0, where, " has shape ",
                      json_excerpt(j["shape"]), ": sizes must be non-negative integers");
    const int64_t n = size.get<int64_t>();
    COHORT_CHECK_KIND(kInvalidArgument, n == 0 || numel <= data_bytes / n, where, " has shape ",
                      json_excerpt(j["shape"]), ", larger than the file's ", data_bytes, " bytes of data");
    numel *= n;
    e.shape.push_back(n);
  }
  const auto& offsets = j["data_offsets"];
  COHORT_CHECK_KIND(
      kInvalidArgument,
      offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      where, " has data_offsets ", json_excerpt(offsets), ": expected [begin, end]");
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  COHORT_CHECK_KIND(kInvalidArgument, begin <= end, where, " has data_offsets [", begin, ", ", end,
                    "]: it begins after it ends");
  COHORT_CHECK_KIND(kIO, end <= uint64_t(data_bytes), where, " has data_offsets [", begin, ", ", end,
                    "] outside the file's ", data_bytes, " bytes of data (a truncated file?)");
  e.begin = int64_t(begin);
  e.end = int64_t(end);
  const int64_t expected = numel * int64_t(c10::elementSize(*dtype));
  COHORT_CHECK_KIND(kInvalidArgument, e.end - e.begin == expected, where, " has ", e.end - e.begin, " bytes for a ",
                    type, " ", detail::shape_text(e.shape), " tensor of ", expected, " bytes");
  return e;
}

// The header as Python's safetensors reads it: a name is given once (nlohmann would let the last of
// two win), and nothing nests past a tensor's shape list (3 levels), refused while parsing so a
// hostile header never builds a deep value (an 80 MB nested __metadata__ cost 3.2 GB).
detail::JsonReadOptions header_options(const std::string& path, uint64_t length) {
  detail::JsonReadOptions options;
  options.source = path + ": the " + std::to_string(length) + "-byte header";
  options.document = "safetensors header";
  options.max_depth = 3;  // the header, a tensor's entry, its shape or data_offsets
  options.unique_keys = true;
  return options;
}

// __metadata__ is a map of strings to strings (or null), as Python's safetensors requires.
void check_metadata(const std::string& path, const nlohmann::json& metadata) {
  COHORT_CHECK_KIND(kInvalidArgument, metadata.is_object() || metadata.is_null(), path, ": __metadata__ is ",
                    json_excerpt(metadata), ", not a map of strings to strings");
  if (metadata.is_null()) return;
  for (const auto& [key, value] : metadata.items()) {
    COHORT_CHECK_KIND(kInvalidArgument, value.is_string(), path, ": __metadata__ '", excerpt(key), "' is ",
                      json_excerpt(value), ", not a string (the format's metadata maps strings to strings)");
  }
}

// The format indexes every byte of the data section (Python's safetensors refuses a hole or bytes after
// the last tensor): such bytes were read past, unsaid. `by_offset` is sorted and free of overlaps.
void check_coverage(const std::string& path, const std::vector<const Entry*>& by_offset, int64_t data_bytes) {
  int64_t covered = 0;
  for (const Entry* e : by_offset) {
    if (e->begin == e->end) continue;
    COHORT_CHECK_KIND(kInvalidArgument, e->begin == covered, path, ": tensor '", excerpt(e->name), "' begins at byte ",
                      e->begin, " of the data, but the tensors before it end at ", covered,
                      ": the format indexes every byte (a damaged file?)");
    covered = e->end;
  }
  COHORT_CHECK_KIND(kInvalidArgument, covered == data_bytes, path, ": ", data_bytes - covered,
                    " bytes of data follow the last tensor's end at byte ", covered,
                    ": the format indexes every byte (a damaged file?)");
}

// The header's entries, checked against the data section's size and for overlaps.
std::vector<Entry> read_header(std::ifstream& in, const std::string& path, int64_t file_bytes,
                               std::map<std::string, std::string>* metadata_out = nullptr) {
  COHORT_CHECK_KIND(kInvalidArgument, file_bytes >= 8, path, ": not a safetensors file: ", file_bytes,
                    " bytes, shorter than the 8-byte header length");
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  COHORT_CHECK_KIND(kIO, in, path, ": cannot read the header length");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(length_bytes[i]) << (8 * i);
  COHORT_CHECK_KIND(kInvalidArgument, length <= uint64_t(kSafetensorsMaxHeaderBytes), path, ": header length ", length,
                    " is above the format's limit of ", kSafetensorsMaxHeaderBytes, " bytes (not a safetensors file?)");
  COHORT_CHECK_KIND(kIO, length <= uint64_t(file_bytes - 8), path, ": header length ", length, " is beyond the file's ",
                    file_bytes, " bytes (a truncated file?)");
  COHORT_CHECK_KIND(kInvalidArgument, length >= 2, path, ": header length ", length,
                    " leaves no room for the header's JSON object (not a safetensors file?)");
  std::string text(length, '\0');
  in.read(text.data(), std::streamsize(length));
  COHORT_CHECK_KIND(kIO, in, path, ": cannot read the ", length, "-byte header");
  const auto header = detail::parse_json(text, header_options(path, length));
  COHORT_CHECK_KIND(kInvalidArgument, header.is_object(), path, ": the ", length,
                    "-byte header is not a JSON object (not a safetensors file?)");
  if (const auto metadata = header.find("__metadata__"); metadata != header.end()) {
    check_metadata(path, *metadata);
    if (metadata_out != nullptr && metadata->is_object())
      *metadata_out = metadata->get<std::map<std::string, std::string>>();
  }
  const int64_t data_bytes = file_bytes - 8 - int64_t(length);
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    entries.push_back(parse_entry(path, name, value, data_bytes));
  }
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  const Entry* furthest = nullptr;  // of the tensors before, the one that ends last
  for (const Entry* e : by_offset) {
    if (e->begin == e->end) continue;
    COHORT_CHECK_KIND(kInvalidArgument, furthest == nullptr || e->begin >= furthest->end, path, ": tensors '",
                      excerpt(furthest->name), "' and '", excerpt(e->name), "' overlap (bytes ", e->begin, " < ",
                      furthest->end, ")");
    furthest = e;
  }
  check_coverage(path, by_offset, data_bytes);
  return entries;
}

// The open file and its size: a regular file only (a fifo would block the open, a device be read
// without end), looked at before it is opened.
std::ifstream open_safetensors(const std::string& path, int64_t* bytes) {
  struct stat info {};
  COHORT_CHECK_KIND(kIO, ::stat(path.c_str(), &info) == 0, "cannot read safetensors file ", path, ": ",
                    std::strerror(errno));
  const char* type = detail::odd_file_type(info.st_mode);
  COHORT_CHECK_KIND(kIO, type == nullptr, "safetensors file ", path, " is ", type, ", not a regular file");
  std::ifstream in(path, std::ios::binary);
  COHORT_CHECK_KIND(kIO, in, "cannot open safetensors file ", path);
  *bytes = int64_t(info.st_size);
  return in;
}

}  // namespace

namespace detail {

bool looks_like_safetensors(const char* bytes, size_t size) {
  if (size < 10) return false;
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return length >= 2 && length <= size - 8 && bytes[8] == '{';
}

SafetensorsIndex read_safetensors_index(const std::string& path) {
  int64_t size = 0;
  std::ifstream in = open_safetensors(path, &size);
  SafetensorsIndex index;
  for (const Entry& e : read_header(in, path, size, &index.metadata))
    index.tensors.push_back({e.name, e.shape, e.type, e.begin, e.end});
  index.data_start = int64_t(in.tellg());
  return index;
}

}  // namespace detail

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path) {
  int64_t size = 0;
  std::ifstream in = open_safetensors(path, &size);
  const std::vector<Entry> entries = read_header(in, path, size);
  const int64_t data_start = int64_t(in.tellg());
  std::map<std::string, torch::Tensor> tensors;
  for (const Entry& e : entries) {
    auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    in.seekg(std::streamoff(data_start + e.begin));
    in.read(static_cast<char*>(tensor.data_ptr()), std::streamsize(e.end - e.begin));
    COHORT_CHECK_KIND(kIO, in, path, ": cannot read the ", e.end - e.begin, " bytes of tensor '", excerpt(e.name), "'");
    tensors.emplace(e.name, std::move(tensor));
  }
  return tensors;
}

void load_state_dict(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& tensors,
                     const StateDictOptions& options) {
  std::vector<std::pair<torch::Tensor, const torch::Tensor*>> copies;
  std::set<std::string> used;
  auto plan = [&](const std::string& name, const torch::Tensor& target) {
    const std::string key = options.prefix() + name;
    const auto it = tensors.find(key);
    COHORT_CHECK_KIND(kInvalidArgument, it != tensors.end(), "load_state_dict: no tensor '", excerpt(key),
                      "' for the module's '", name, "'", tensors.empty() ? " (no tensors given)" : "");
    COHORT_CHECK_KIND(kInvalidArgument, it->second.sizes() == target.sizes(), "load_state_dict: tensor '", excerpt(key),
                      "' has shape ", detail::shape_text(it->second.sizes().vec()), ", the module's '", name, "' ",
                      detail::shape_text(target.sizes().vec()));
    copies.emplace_back(target, &it->second);
    used.insert(key);
  };
  for (const auto& item : module.named_parameters()) plan(item.key(), item.value());
  for (const auto& item : module.named_buffers()) plan(item.key(), item.value());
  if (options.strict()) {
    for (const auto& [key, value] : tensors) {
      const bool under_prefix = key.compare(0, options.prefix().size(), options.prefix()) == 0;
      COHORT_CHECK_KIND(kInvalidArgument, !under_prefix || used.count(key), "load_state_dict: tensor '", excerpt(key),
                        "' names nothing in the module (strict; StateDictOptions().strict(false) ignores it)");
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, source] : copies) target.copy_(*source);
}

}  // namespace cohort
