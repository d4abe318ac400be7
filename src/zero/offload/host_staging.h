// ZeRO-Offload's traffic between a CUDA device and host memory through a few page-locked buffers of
// bounded size (DeepSpeed's users find host RAM blown up when every state is pinned: here at most
// `slots` x slot size is, whatever the model). Reduced gradient shards go down as each reduction
// finishes, while backward goes on, and land in the fp32 host gradients (copied, or added when an
// accumulation has one there); the updated masters go up after the host step. Copies run on a side
// stream (compat/copy_stream.h); a slot is reused only once the GPU has finished its copy. On the CPU
// (tests) the same slots are filled synchronously.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "compat/copy_stream.h"

namespace cohort::detail {

class HostStaging {
 public:
  /// `slots` buffers of at most `max_slot_bytes` each, page-locked when `device` is CUDA; made at
  /// the first copy, sized to the largest tensor seen by then when that is smaller.
  HostStaging(torch::Device device, int slots, int64_t max_slot_bytes);
  ~HostStaging();

  /// Queues `src` (1-D, on the device, any dtype) into `dst` (1-D host tensor of as many elements):
  /// copied, or added when `accumulate`. `dst` holds the result after drain().
  void download(const torch::Tensor& src, const torch::Tensor& dst, bool accumulate);
  /// Queues `src` (1-D host tensor) into `dst` (1-D, on the device, cast to its dtype); the compute
  /// stream sees it after uploads_done().
  void upload(const torch::Tensor& src, const torch::Tensor& dst);
  /// Every queued download has landed (blocks until the GPU ran the copies).
  void drain();
  /// The compute stream waits, on the GPU, for every queued upload.
  void uploads_done();
  /// What the slots hold (page-locked on a GPU).
  int64_t pinned_bytes() const;
  /// Bytes copied each way since construction.
  int64_t bytes_down() const { return bytes_down_; }
  int64_t bytes_up() const { return bytes_up_; }

 private:
  struct Pending {
    int slot = 0;
    CopyEvent done;
    torch::Tensor staged;  // the slot's bytes as the copied dtype
    torch::Tensor keep;    // the device tensor the copy reads or writes, alive until it ran
    torch::Tensor host;    // a download's destination
    bool accumulate = false;
  };
  int acquire(int64_t bytes_needed);
  void complete_oldest();
  torch::Tensor staged(int slot, torch::Dtype dtype, int64_t numel) const;
  template <typename Fill, typename Copy>
  int64_t queue_chunks(int64_t numel, torch::Dtype dtype, const Fill& fill, const Copy& copy);

  torch::Device device_;
  int slot_count_;
  int64_t max_slot_bytes_;
  int64_t slot_bytes_ = 0;
  std::unique_ptr<CopyStream> stream_;  // CUDA; null on the CPU
  std::vector<torch::Tensor> slots_;    // uint8 [slot_bytes_]
  std::vector<int> free_;
  std::deque<Pending> pending_;
  int64_t bytes_down_ = 0, bytes_up_ = 0;
};

}  // namespace cohort::detail
