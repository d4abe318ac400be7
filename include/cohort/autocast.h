// cohort::AutocastGuard: torch.autocast for C++, the same on LibTorch 1.13 and 2.x (whose autocast
// functions differ). While it lives, eligible ops on `device` (matmul, conv, linear, ...) run in
// `dtype` (bfloat16 or float16) and the rest in float32, as torch.autocast does in Python.
//
//   { cohort::AutocastGuard autocast(torch::kCUDA, torch::kBFloat16); loss = loss_fn(net(x), y); }
//   loss.backward();   // outside the guard, as in Python
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

class AutocastGuard {
 public:
  /// device: kCUDA or kCPU; dtype: kBFloat16 or kHalf (CPU autocast takes bfloat16 only).
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  c10::ScalarType previous_dtype_;
};

}  // namespace cohort
COHORT_EXPORT_END
