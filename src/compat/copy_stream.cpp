// CopyStream without CUDA (copy_stream.h): there is no device to copy to, so none can be made.
#include "compat/copy_stream.h"

#include "cohort_config.h"

#if !COHORT_WITH_CUDA
#include "cohort/error.h"

namespace cohort::detail {

struct CopyEvent::Impl {};
CopyEvent::CopyEvent() = default;
CopyEvent::~CopyEvent() = default;
CopyEvent::CopyEvent(CopyEvent&&) noexcept = default;
CopyEvent& CopyEvent::operator=(CopyEvent&&) noexcept = default;
CopyEvent::CopyEvent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
bool CopyEvent::ready() const { return true; }
void CopyEvent::synchronize() const {}

struct CopyStream::Impl {};
CopyStream::CopyStream(torch::Device device) {
  throw Error("a copy stream on " + device.str() + " needs a cohort built with CUDA", ErrorKind::kInvalidArgument);
}
CopyStream::~CopyStream() = default;
void CopyStream::copy(const torch::Tensor&, const torch::Tensor&) {}
CopyEvent CopyStream::record() { return CopyEvent(); }
void CopyStream::compute_waits() {}

}  // namespace cohort::detail
#endif
