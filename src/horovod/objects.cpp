// hvd::broadcast_object and hvd::allgather_object (Horovod's, for the values Python pickles): a value is
// pickled by torch::pickle_save into bytes, whose count travels first and the bytes second, each as an
// hvd operation (so they are negotiated like any other), and unpickled on the receiving ranks.
#include <torch/serialize.h>

#include "horovod/context.h"

namespace cohort::hvd {
namespace {

torch::Tensor to_bytes(const c10::IValue& value) {
  const std::vector<char> data = torch::pickle_save(value);
  auto bytes = torch::empty({int64_t(data.size())}, torch::kUInt8);
  std::copy(data.begin(), data.end(), reinterpret_cast<char*>(bytes.data_ptr<uint8_t>()));
  return bytes;
}

c10::IValue from_bytes(const torch::Tensor& bytes) {
  const auto* begin = reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>());
  return torch::pickle_load(std::vector<char>(begin, begin + bytes.numel()));
}

std::string part(const std::string& name, const char* suffix) { return name.empty() ? "" : name + suffix; }

}  // namespace

c10::IValue broadcast_object(const c10::IValue& value, int root_rank, const std::string& name,
                             const ProcessSet& process_set) {
  const bool root = detail::Context::get("hvd::broadcast_object").world().rank() == root_rank;
  const torch::Tensor bytes = root ? to_bytes(value) : torch::Tensor();
  const auto count = broadcast(torch::tensor({root ? bytes.numel() : int64_t(0)}), root_rank, part(name, ".size"),
                               process_set);
  auto received = root ? bytes : torch::empty({count[0].item<int64_t>()}, torch::kUInt8);
  received = broadcast(received, root_rank, part(name, ".bytes"), process_set);
  return root ? value : from_bytes(received);
}

std::vector<c10::IValue> allgather_object(const c10::IValue& value, const std::string& name,
                                          const ProcessSet& process_set) {
  detail::Context::get("hvd::allgather_object");
  const torch::Tensor bytes = to_bytes(value);
  const auto counts = allgather(torch::tensor({bytes.numel()}), part(name, ".sizes"), process_set);
  const auto all = allgather(bytes, part(name, ".bytes"), process_set);
  std::vector<c10::IValue> values;
  int64_t at = 0;
  for (int64_t r = 0; r < counts.numel(); ++r) {
    const int64_t n = counts[r].item<int64_t>();
    values.push_back(from_bytes(all.narrow(0, at, n).contiguous()));
    at += n;
  }
  return values;
}

}  // namespace cohort::hvd
