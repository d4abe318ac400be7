// SafetensorsSource (safetensors_source.h): headers through read_safetensors_index (bounded and
// validated as load_safetensors validates them), the index through the bounded JSON reader, and each
// range read with pread into a buffer of the file's dtype, then converted.
#include "checkpoint/safetensors_source.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cohort/error.h"
#include "cohort/safetensors.h"
#include "core/check.h"
#include "core/file_read.h"
#include "core/json_read.h"
#include "core/text.h"

namespace cohort::detail {
namespace {

// An index names a few thousand tensors at most; 100 MB is the format's own bound for a header.
constexpr int64_t kMaxIndexBytes = kSafetensorsMaxHeaderBytes;

bool is_index(const std::string& path) {
  const std::string suffix = ".json";
  return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A file the index names: a plain name in the index's directory (no directory part, no "..").
void check_file_name(const std::string& index, const std::string& tensor, const std::string& file) {
  const bool plain = !file.empty() && file.find('/') == std::string::npos && file != "." && file != ".." &&
                     file.find('\0') == std::string::npos;
  COHORT_CHECK_KIND(kInvalidArgument, plain, index, ": weight_map gives tensor '", excerpt(tensor), "' the file \"",
                    excerpt(file), "\": expected a file name beside the index (no directory part)");
}

}  // namespace

SafetensorsSource::SafetensorsSource(const std::string& path) : path_(path) {
  try {
    if (is_index(path)) {
      read_index(path);
    } else {
      add_file(path, nullptr);
    }
  } catch (...) {
    for (File& f : files_) ::close(f.fd);
    throw;
  }
}

SafetensorsSource::~SafetensorsSource() {
  for (File& f : files_) ::close(f.fd);
}

// {"metadata": {...}, "weight_map": {"tensor": "model-00001-of-00002.safetensors", ...}}: each file
// opened once and held to the tensors the map gives it (another tensor in it is not the model's).
void SafetensorsSource::read_index(const std::string& path) {
  JsonReadOptions options;
  options.source = "safetensors index " + path;
  options.document = "safetensors index";
  options.max_depth = 3;
  options.unique_keys = true;
  const auto index = parse_json(read_regular_file(path, options.source, kMaxIndexBytes), options);
  COHORT_CHECK_KIND(kInvalidArgument, index.is_object() && index.contains("weight_map"), options.source,
                    ": not an object with a weight_map (Hugging Face's model.safetensors.index.json)");
  if (const auto found = index.find("metadata"); found != index.end() && found->is_object())
    for (const auto& [key, value] : found->items())
      if (value.is_string()) metadata_[key] = value.get<std::string>();
  const auto& map = index["weight_map"];
  COHORT_CHECK_KIND(kInvalidArgument, map.is_object() && !map.empty(), options.source, ": weight_map is ",
                    json_excerpt(map), ", not a map of tensor names to files");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : map.items()) {
    COHORT_CHECK_KIND(kInvalidArgument, file.is_string(), options.source, ": weight_map gives tensor '",
                      excerpt(tensor), "' ", json_excerpt(file), ", not a file name");
    check_file_name(path, tensor, file.get<std::string>());
    by_file[file.get<std::string>()].push_back(tensor);
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (const auto& [file, tensors] : by_file) add_file((dir / file).string(), &tensors);
}

// The file's header; `only`: the tensors an index gives it (each must be there), null for all.
void SafetensorsSource::add_file(const std::string& path, const std::vector<std::string>* only) {
  const SafetensorsIndex header = read_safetensors_index(path);
  File file{path, open_regular_file(path, "safetensors file " + path), header.data_start};
  files_.push_back(file);
  std::map<std::string, const SafetensorsIndex::Tensor*> by_name;
  for (const auto& t : header.tensors) by_name[t.name] = &t;
  auto add = [&](const SafetensorsIndex::Tensor& t) {
    COHORT_CHECK_KIND(kInvalidArgument, !tensors_.count(t.name), path_, ": tensor '", excerpt(t.name),
                      "' is given twice");
    tensors_[t.name] = Located{files_.size() - 1, t, *dtype_of_safetensors(t.dtype)};
  };
  if (only == nullptr) {  // the file itself: its metadata is the set's
    for (const auto& t : header.tensors) add(t);
    metadata_ = header.metadata;
    return;
  }
  for (const std::string& name : *only) {
    const auto found = by_name.find(name);
    COHORT_CHECK_KIND(kInvalidArgument, found != by_name.end(), path_, ": weight_map puts tensor '", excerpt(name),
                      "' in ", path, ", which does not hold it");
    add(*found->second);
  }
}

std::vector<std::string> SafetensorsSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, located] : tensors_) out.push_back(name);
  return out;
}

void SafetensorsSource::read(const std::string& name, const std::vector<int64_t>& shape, int64_t begin,
                             torch::Tensor out) const {
  const auto found = tensors_.find(name);
  COHORT_CHECK_KIND(kInvalidArgument, found != tensors_.end(), path_, ": no tensor '", excerpt(name), "'");
  const Located& at = found->second;
  COHORT_CHECK_KIND(kInvalidArgument, at.tensor.shape == shape, path_, ": tensor '", excerpt(name), "' has shape ",
                    shape_text(at.tensor.shape), ", the model's ", shape_text(shape));
  const int64_t count = out.numel();
  const int64_t numel = c10::multiply_integers(shape);
  COHORT_CHECK_KIND(kInternal, begin >= 0 && count <= numel - begin && out.is_contiguous() && out.is_cpu(),
                    "SafetensorsSource::read: elements [", begin, ", ", begin + count, ") of '", name, "' (", numel,
                    " elements)");
  if (count == 0) return;
  const int64_t size = int64_t(c10::elementSize(at.dtype));
  torch::Tensor raw = out.scalar_type() == at.dtype ? out : torch::empty({count}, out.options().dtype(at.dtype));
  const File& file = files_[at.file];
  auto* bytes = static_cast<char*>(raw.data_ptr());
  int64_t done = 0;
  const int64_t total = count * size, from = file.data_start + at.tensor.begin + begin * size;
  while (done < total) {
    const ssize_t n = ::pread(file.fd, bytes + done, size_t(total - done), off_t(from + done));
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, file.path, ": cannot read tensor '", excerpt(name), "' (bytes ", from + done, " to ",
                      from + total,
                      "): ", n == 0 ? "the file ends there (truncated since opened?)" : std::strerror(errno));
    done += n;
  }
  if (!raw.is_same(out)) out.copy_(raw);
}

}  // namespace cohort::detail
