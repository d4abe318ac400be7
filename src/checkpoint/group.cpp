// String allgather over Comm (see group.h): lengths first, then the bytes padded to the longest.
#include "checkpoint/group.h"

#include <cstring>

#include "cohort/world.h"

namespace cohort::detail::ckpt {

Group::Group(std::shared_ptr<Comm> comm) : comm_(std::move(comm)) {
  if (!comm_ && is_initialized()) comm_ = current_world().comm_ptr();
  if (comm_) {
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
}

std::vector<std::string> Group::allgather(const std::string& text) {
  if (size_ == 1) return {text};
  const torch::Tensor lengths =
      comm_->allgather(torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64));
  const int64_t longest = lengths.max().item<int64_t>();
  torch::Tensor mine = torch::zeros({std::max<int64_t>(longest, 1)}, torch::kUInt8);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  const torch::Tensor all = comm_->allgather(mine);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) {
    const auto* bytes = static_cast<const char*>(all[r].data_ptr());
    out.emplace_back(bytes, static_cast<size_t>(lengths[r][0].item<int64_t>()));
  }
  return out;
}

}  // namespace cohort::detail::ckpt
