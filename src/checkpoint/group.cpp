// String allgather over Comm (see group.h): each rank's bytes through the variable-size allgather.
#include "checkpoint/group.h"

#include <cstring>

#include "comm/ragged.h"
#include "world/resolve_comm.h"

namespace cohort::detail::ckpt {

Group::Group(std::shared_ptr<Comm> comm) : comm_(resolve_comm(std::move(comm), "checkpoint")) {
  rank_ = comm_->rank();
  size_ = comm_->size();
}

std::vector<std::string> Group::allgather(const std::string& text) {
  if (size_ == 1) return {text};
  torch::Tensor mine = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  std::vector<std::string> out;
  for (const torch::Tensor& part : allgather_ragged(*comm_, mine))
    out.emplace_back(static_cast<const char*>(part.data_ptr()), static_cast<size_t>(part.numel()));
  return out;
}

// Each item as "<size>:<bytes>".
std::vector<std::vector<std::string>> Group::allgather_lists(const std::vector<std::string>& items) {
  std::string packed;
  for (const std::string& item : items) packed += std::to_string(item.size()) + ":" + item;
  std::vector<std::vector<std::string>> out;
  for (const std::string& text : allgather(packed)) {
    out.emplace_back();
    for (size_t at = 0; at < text.size();) {
      const size_t colon = text.find(':', at);
      const size_t size = std::stoull(text.substr(at, colon - at));
      out.back().push_back(text.substr(colon + 1, size));
      at = colon + 1 + size;
    }
  }
  return out;
}

}  // namespace cohort::detail::ckpt
