// Rank-order elementwise reductions for the shared-memory transport (see shm_reduce.h).
#include "comm/shm_reduce.h"

#include <ATen/ATen.h>

#include <cstring>

namespace cohort::detail {
namespace {

// out[i] = a[i] + b[i], 32 bytes at a time. GCC at -O2 left the plain loop scalar (its cheap cost
// model will not add a remainder loop or alias checks): in perf it was the largest part of a 1 MiB
// allreduce, above the copies. Vector extensions give the same per-element IEEE additions.
template <typename T>
void add_arrays(T* out, const T* a, const T* b, int64_t n) {
  typedef T Vec __attribute__((vector_size(32)));
  constexpr int64_t kLanes = int64_t(sizeof(Vec) / sizeof(T));
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec x, y;
    std::memcpy(&x, a + i, sizeof x);  // unaligned loads: slots and tensors align differently
    std::memcpy(&y, b + i, sizeof y);
    x += y;
    std::memcpy(out + i, &x, sizeof x);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void sum_loop(T* out, const std::vector<const void*>& parts, int64_t n) {
  add_arrays(out, static_cast<const T*>(parts[0]), static_cast<const T*>(parts[1]), n);
  for (size_t j = 2; j < parts.size(); ++j) add_arrays(out, out, static_cast<const T*>(parts[j]), n);
}

at::Tensor view_of(const void* data, int64_t n, at::ScalarType dtype) {
  return at::from_blob(const_cast<void*>(data), {n}, at::TensorOptions().dtype(dtype).device(at::kCPU));
}

// LibTorch's kernels: the same operation order as the loops (out = p0 op p1, then out op= pj).
void reduce_with_aten(at::Tensor out, const std::vector<const void*>& parts, int64_t n, at::ScalarType dtype,
                      ReduceOp op) {
  auto part = [&](size_t j) { return view_of(parts[j], n, dtype); };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      at::add_out(out, part(0), part(1));
      for (size_t j = 2; j < parts.size(); ++j) out.add_(part(j));
      return;
    case ReduceOp::kProduct:
      at::mul_out(out, part(0), part(1));
      for (size_t j = 2; j < parts.size(); ++j) out.mul_(part(j));
      return;
    case ReduceOp::kMin:
      at::minimum_out(out, part(0), part(1));
      for (size_t j = 2; j < parts.size(); ++j) at::minimum_out(out, out, part(j));
      return;
    case ReduceOp::kMax:
      at::maximum_out(out, part(0), part(1));
      for (size_t j = 2; j < parts.size(); ++j) at::maximum_out(out, out, part(j));
      return;
  }
}

}  // namespace

void reduce_parts(void* out, const std::vector<const void*>& parts, int64_t n, at::ScalarType dtype, ReduceOp op) {
  if (n <= 0) return;
  // Above this many elements the dispatcher's cost vanishes and LibTorch's kernels (AVX2 where the CPU
  // has it; this file is built for baseline x86-64) are faster than the loop.
  constexpr int64_t kLoopUpTo = 1 << 16;
  const bool sum = (op == ReduceOp::kSum || op == ReduceOp::kAvg) && n <= kLoopUpTo;
  if (sum && parts.size() >= 2 && dtype == at::kFloat) return sum_loop(static_cast<float*>(out), parts, n);
  if (sum && parts.size() >= 2 && dtype == at::kDouble) return sum_loop(static_cast<double*>(out), parts, n);
  reduce_with_aten(view_of(out, n, dtype), parts, n, dtype, op);
}

}  // namespace cohort::detail
