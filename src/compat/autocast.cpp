// AutocastGuard over both LibTorch generations: 1.13 has per-device functions (set_enabled for CUDA,
// set_cpu_enabled), 2.x one set taking the device type.
#include "cohort/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort {
namespace {

#if TORCH_VERSION_MAJOR >= 2
bool enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
c10::ScalarType dtype_of(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool enabled(c10::DeviceType d) {
  return d == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_enabled(c10::DeviceType d, bool on) {
  d == c10::kCUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
c10::ScalarType dtype_of(c10::DeviceType d) {
  return d == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  d == c10::kCUDA ? at::autocast::set_autocast_gpu_dtype(t) : at::autocast::set_autocast_cpu_dtype(t);
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype) : device_(device) {
  COHORT_CHECK_KIND(kInvalidArgument, device == c10::kCUDA || device == c10::kCPU, "AutocastGuard: device ", device,
                    " is not supported (cuda or cpu)");
  COHORT_CHECK_KIND(kInvalidArgument, dtype == c10::kBFloat16 || dtype == c10::kHalf, "AutocastGuard: dtype ", dtype,
                    " is not a low-precision type (bfloat16 or float16)");
  COHORT_CHECK_KIND(kInvalidArgument, device == c10::kCUDA || dtype == c10::kBFloat16,
                    "AutocastGuard: CPU autocast runs in bfloat16, not float16 (LibTorch has few float16 CPU kernels)");
  was_enabled_ = enabled(device);
  previous_dtype_ = dtype_of(device);
  set_enabled(device, true);
  set_dtype(device, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // Leaving the outermost autocast region drops the cast weights it cached, as Python's does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, was_enabled_);
  set_dtype(device_, previous_dtype_);
}

}  // namespace cohort
