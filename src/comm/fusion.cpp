// Tensor fusion (Horovod's idea): many small tensors are packed into one flat buffer, reduced with a
// single collective and unpacked, so the per-collective latency is paid once instead of per tensor.
#include <ATen/ATen.h>

#include "cohort/comm.h"
#include "comm/comm_impl.h"
#include "core/check.h"

namespace cohort {

Work Comm::allreduce_fused_async(std::vector<torch::Tensor> tensors, ReduceOp op) {
  if (tensors.empty()) return Work();
  const auto dtype = tensors[0].scalar_type();
  const auto device = tensors[0].device();
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    COHORT_CHECK_KIND(kInvalidArgument,
                      tensors[i].defined() && tensors[i].scalar_type() == dtype && tensors[i].device() == device,
                      "allreduce_fused: tensor ", i, " is ", detail::dtype_name(tensors[i].scalar_type()), " on ",
                      tensors[i].device(), " but tensor 0 is ", detail::dtype_name(dtype), " on ", device,
                      "; fuse tensors of one dtype and device per call");
    flat.push_back(tensors[i].reshape({-1}));
  }
  torch::Tensor buffer = at::cat(flat);
  Work reduce = allreduce_async(buffer, op);
  // The unpack runs when the caller waits: wrap the reduction in an op whose finish copies back.
  auto unpack = std::make_shared<detail::PendingOp>();
  auto inner = std::make_shared<Work>(std::move(reduce));
  unpack->fingerprint.op = detail::OpKind::kAllreduce;
  unpack->finish = [inner, buffer, tensors]() mutable {
    inner->wait();
    int64_t offset = 0;
    for (auto& t : tensors) {
      const int64_t n = t.numel();
      t.view(t.sizes()).copy_(buffer.narrow(0, offset, n).view(t.sizes()));
      offset += n;
    }
  };
  return Work(impl_->wrap_local(unpack));
}

void Comm::allreduce_fused(std::vector<torch::Tensor>& tensors, ReduceOp op) {
  allreduce_fused_async(tensors, op).wait();
}

}  // namespace cohort
