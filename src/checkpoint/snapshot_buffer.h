// The copy an async save writes from (async_saves.h): the tensors this rank writes, copied into one
// buffer (pinned host memory when any lies on a GPU, so the copy runs at the link's speed) that the
// next snapshot reuses when it fits. At most one save is in flight, so one buffer is all it takes: its
// size is this rank's share of the checkpoint.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace cohort::detail::ckpt {

class SnapshotBuffer {
 public:
  /// Makes room for tensors shaped as `like` (dtype, shape, device; meta tensors too): slot i for like[i].
  void prepare(const std::vector<torch::Tensor>& like);
  /// Copies `tensor` (shaped as like[slot]) into its slot and returns the copy, contiguous on the CPU: a
  /// view of this buffer, valid until the next prepare() or release().
  torch::Tensor copy(size_t slot, const torch::Tensor& tensor);
  /// Bytes held between saves.
  int64_t capacity() const { return bytes_.defined() ? bytes_.numel() : 0; }
  bool pinned() const { return pinned_; }
  void release();

 private:
  torch::Tensor bytes_;           // uint8
  std::vector<int64_t> offsets_;  // of each slot in bytes_
  bool pinned_ = false;
};

}  // namespace cohort::detail::ckpt
