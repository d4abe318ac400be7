// Coalesced broadcast (see coalesced.h).
#include "comm/coalesced.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/grad_kit.h"


namespace cohort::detail {

void broadcast_coalesced(Comm& comm, const std::vector<torch::Tensor>& tensors, int root) {
  if (comm.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // Group by dtype and device, in first-seen order (the same on every rank for the same model).
  std::vector<std::vector<torch::Tensor>> groups;
  std::vector<DtypeDevice> keys;
  for (const auto& t : tensors) {
    const auto g = size_t(dtype_device_group(t, keys));
    if (g == groups.size()) groups.emplace_back();
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
