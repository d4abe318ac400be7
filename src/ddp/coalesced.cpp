// Coalesced broadcast (see coalesced.h).
#include "ddp/coalesced.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <map>

namespace cohort::detail {

void broadcast_coalesced(Comm& comm, const std::vector<torch::Tensor>& tensors, int root) {
  if (comm.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // Group by dtype and device, in first-seen order (the same on every rank for the same model).
  std::vector<std::vector<torch::Tensor>> groups;
  std::vector<std::pair<c10::ScalarType, c10::Device>> keys;
  for (const auto& t : tensors) {
    const auto key = std::make_pair(t.scalar_type(), t.device());
    size_t g = 0;
    while (g < keys.size() && keys[g] != key) ++g;
    if (g == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[g].push_back(t);
  }
  for (auto& group : groups) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : group) flat.push_back(t.detach().reshape({-1}));
    torch::Tensor buffer = at::cat(flat);
    comm.broadcast(buffer, root);
    int64_t offset = 0;
    for (auto& t : group) {
      t.detach().copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace cohort::detail
