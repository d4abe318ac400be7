// Working space that a transport keeps between collectives: one block of bytes grown to the largest
// size asked for, so an op allocates nothing once that size was seen (a fresh tensor per op of a
// bucket's size costs page faults: glibc gives big freed blocks back to the kernel).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace cohort::detail {

class GrownBuffer {
 public:
  /// `numel` elements of `options`' dtype, contents undefined; valid until the next call.
  at::Tensor get(int64_t numel, const at::TensorOptions& options);

 private:
  at::Tensor bytes_;
};

}  // namespace cohort::detail
