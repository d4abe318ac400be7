// Counting parameters for cohort-plan: the example's CNN from its own source (examples/fashion_mnist/
// model.cpp is compiled into the tool, so the count follows the example), or a checkpoint file tried
// first as a torch::save archive (a TorchScript module) and then as a torch::pickle_save IValue, or a
// safetensors file counted from its header.
#include "model_size.h"

#include <torch/script.h>
#include <torch/serialize.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "checkpoint/safetensors_index.h"
#include "cohort/error.h"
#include "models/fashion_mnist_net.h"

namespace cohort_plan {
namespace {

// The first line of an exception text (LibTorch appends stack traces and source excerpts).
std::string first_line(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
  return text.substr(0, text.find('\n'));
}

// Adds every distinct tensor reachable from `value` (lists, tuples, dicts, objects) to `size`.
void add_tensors(const c10::IValue& value, std::unordered_set<const void*>* seen, ModelSize* size) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (tensor.defined() && seen->insert(tensor.unsafeGetTensorImpl()).second) {
      size->params += tensor.numel();
      size->tensors += 1;
    }
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) add_tensors(item, seen, size);
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) add_tensors(item, seen, size);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      add_tensors(entry.key(), seen, size);
      add_tensors(entry.value(), seen, size);
    }
  } else if (value.isObject()) {
    for (const c10::IValue& slot : value.toObjectRef().slots()) add_tensors(slot, seen, size);
  }
}

// The whole file: a regular file only (a device such as /dev/zero, a fifo or a directory would be read
// forever or fail oddly), and never more bytes than its size said when opened.
std::vector<char> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a fifo must not block the open
  if (fd < 0) throw cohort::Error("--checkpoint " + path + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw cohort::Error("--checkpoint " + path +
                        " is not a regular file: cohort-plan reads a torch::save or "
                        "torch::pickle_save file");
  }
  std::vector<char> bytes(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      throw cohort::Error("--checkpoint " + path + ": cannot read: " + std::strerror(error));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

}  // namespace

ModelSize count_named_model(const std::string& name) {
  if (name != "fashion_mnist_cnn") {
    throw cohort::Error("--model " + name + " is not a model cohort-plan knows (fashion_mnist_cnn, gpt)");
  }
  fashion_mnist::Net net;
  ModelSize size;
  for (const auto& parameter : net->parameters()) {
    size.params += parameter.numel();
    size.tensors += 1;
  }
  for (const auto& buffer : net->buffers()) size.buffer_elements += buffer.numel();
  size.format = "the fashion_mnist example's network, built with LibTorch";
  return size;
}

namespace {

// A safetensors file (Hugging Face weights, or what cohort-ckpt consolidate writes), counted from its
// header. A consolidated cohort checkpoint also holds optimizer states and RNG states: only its
// "model/" tensors are parameters, and one without them (a ZeRO engine's flat groups) is refused.
ModelSize count_safetensors(const std::string& path) {
  const auto index = cohort::detail::read_safetensors_index(path);
  const auto format = index.metadata.find("format");
  const bool consolidated = format != index.metadata.end() && format->second == "cohort-checkpoint consolidated";
  ModelSize size;
  for (const auto& tensor : index.tensors) {
    if (consolidated && tensor.name.rfind("model/", 0) != 0) continue;
    int64_t numel = 1;
    for (int64_t d : tensor.shape) numel *= d;  // bounded by the file's bytes (read_safetensors_index)
    size.params += numel;
    size.tensors += 1;
  }
  if (consolidated && size.tensors == 0) {
    throw cohort::Error("--checkpoint " + path +
                        " is a consolidated cohort checkpoint without 'model/' tensors (a ZeRO engine's state "
                        "mixes parameters and optimizer states): give the model size with --params N");
  }
  size.format = consolidated ? "consolidated cohort checkpoint (its 'model/' tensors only)" : "safetensors file";
  return size;
}

}  // namespace

ModelSize count_checkpoint(const std::string& path) {
  const std::vector<char> bytes = read_file(path);  // a missing or unreadable file fails here
  if (cohort::detail::looks_like_safetensors(bytes.data(), bytes.size())) return count_safetensors(path);
  // torch::save and torch::pickle_save both write a zip archive: LibTorch's text for anything else is
  // 400 characters of miniz internals, said once per format.
  const bool zip = bytes.size() >= 4 && std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0;
  if (!zip) {
    throw cohort::Error("--checkpoint " + path +
                        ": neither a torch::save archive nor torch::pickle_save data (it is not a zip archive) nor a "
                        "safetensors file; for a cohort checkpoint directory, consolidate it first "
                        "(cohort-ckpt consolidate DIR -o model.safetensors)");
  }
  std::string module_error;
  try {
    // torch::save(module) writes a TorchScript archive: parameters and buffers as attributes.
    torch::jit::Module module = torch::jit::load(path);
    ModelSize size;
    for (const at::Tensor& parameter : module.parameters(/*recurse=*/true)) {
      size.params += parameter.numel();
      size.tensors += 1;
    }
    for (const at::Tensor& buffer : module.buffers(/*recurse=*/true)) size.buffer_elements += buffer.numel();
    size.format = "torch::save archive";
    return size;
  } catch (const std::exception& error) {
    module_error = first_line(error);
  }
  try {
    const c10::IValue value = torch::pickle_load(bytes);
    ModelSize size;
    std::unordered_set<const void*> seen;
    add_tensors(value, &seen, &size);
    size.format = "torch::pickle_save data";
    return size;
  } catch (const std::exception& error) {
    throw cohort::Error("--checkpoint " + path +
                        ": neither a torch::save archive nor torch::pickle_save data (as a module: " + module_error +
                        "; as pickled data: " + first_line(error) + ")");
  }
}

}  // namespace cohort_plan
