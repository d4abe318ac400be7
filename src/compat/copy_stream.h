// A side stream for copies between host memory and a CUDA device, and the events that order it
// against the stream the computation runs on. ZeRO-Offload's gradients go down and its updated
// parameters up on it while the compute stream goes on with backward (zero/offload/host_staging.h).
// Built only with CUDA (copy_stream_cuda.cpp); without it, constructing one is kInvalidArgument.
#pragma once

#include <torch/types.h>

#include <memory>

namespace cohort::detail {

/// A point on the side stream's queue: ready() once the GPU ran everything queued before it.
class CopyEvent {
 public:
  CopyEvent();
  ~CopyEvent();
  CopyEvent(CopyEvent&&) noexcept;
  CopyEvent& operator=(CopyEvent&&) noexcept;
  bool ready() const;
  /// Blocks the calling thread until ready().
  void synchronize() const;

  struct Impl;
  explicit CopyEvent(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

class CopyStream {
 public:
  /// A stream from the pool of `device` (CUDA).
  explicit CopyStream(torch::Device device);
  ~CopyStream();

  /// Copies `src` into `dst` (same shape and dtype, one of them in page-locked host memory) on the
  /// side stream, after everything the compute stream has queued so far (what produced `src`).
  void copy(const torch::Tensor& dst, const torch::Tensor& src);
  /// An event after every copy queued so far.
  CopyEvent record();
  /// The compute stream waits, on the GPU, for every copy queued so far (the host does not block).
  void compute_waits();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::detail
