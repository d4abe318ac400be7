// Coalesced broadcast (see coalesced.h).
#include "comm/coalesced.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/grad_kit.h"

namespace cohort::detail {

namespace {

void broadcast_bucket(Comm& comm, const std::vector<torch::Tensor>& bucket, int root) {
  if (bucket.size() == 1 && bucket[0].is_contiguous()) {
    comm.broadcast(bucket[0].detach(), root);  // a tensor alone needs no flat copy
    return;
  }
  std::vector<torch::Tensor> flat;
  for (const auto& t : bucket) flat.push_back(t.detach().reshape({-1}));
  torch::Tensor buffer = at::cat(flat);
  comm.broadcast(buffer, root);
  int64_t offset = 0;
  for (const auto& t : bucket) {
    t.detach().copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

void broadcast_coalesced(Comm& comm, const std::vector<torch::Tensor>& tensors, int root, int64_t bucket_bytes) {
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
  for (const auto& group : groups)
    for (size_t begin = 0; begin < group.size();) {
      // One bucket: consecutive tensors up to bucket_bytes (at least one).
      size_t end = begin + 1;
      int64_t bytes = int64_t(group[begin].nbytes());
      while (end < group.size() && bytes + int64_t(group[end].nbytes()) <= bucket_bytes)
        bytes += int64_t(group[end++].nbytes());
      broadcast_bucket(comm, std::vector<torch::Tensor>(group.begin() + long(begin), group.begin() + long(end)), root);
      begin = end;
    }
}

}  // namespace cohort::detail
