// See grown_buffer.h.
#include "comm/grown_buffer.h"

#include <ATen/ATen.h>

namespace cohort::detail {

at::Tensor GrownBuffer::get(int64_t numel, const at::TensorOptions& options) {
  const int64_t bytes = numel * int64_t(options.dtype().itemsize());
  if (!bytes_.defined() || bytes_.numel() < bytes) bytes_ = at::empty({bytes}, at::kByte);
  return bytes_.narrow(0, 0, bytes).view(options.dtype().toScalarType());
}

}  // namespace cohort::detail
