// DTensor (cohort/dtensor.h): the checks of a layout, and redistribution through the autograd
// function of redistribute.h.
#include "cohort/dtensor.h"

#include "core/check.h"
#include "core/text.h"
#include "tp/redistribute.h"

namespace cohort {
namespace {

// A shard's dimension counted from the front (-1: the last), checked against the tensor's rank.
Placement normalized(const Placement& placement, int64_t dims, const char* where) {
  if (!placement.is_shard()) return placement;
  const int64_t dim = placement.dim() < 0 ? placement.dim() + dims : placement.dim();
  COHORT_CHECK_KIND(kInvalidArgument, dim >= 0 && dim < dims, where, ": ", placement.str(), " of a tensor with ", dims,
                    " dimension(s)");
  return Placement::shard(dim);
}

}  // namespace

DTensor DTensor::from_local(torch::Tensor local, std::shared_ptr<Comm> comm, Placement placement,
                            std::vector<int64_t> shape) {
  COHORT_CHECK_KIND(kInvalidArgument, comm != nullptr && local.defined(),
                    "DTensor::from_local: a defined local tensor and a Comm");
  placement = normalized(placement, local.dim(), "DTensor::from_local");
  if (shape.empty()) {
    shape = local.sizes().vec();
    if (placement.is_shard()) shape[placement.dim()] *= comm->size();
  }
  const auto expected = detail::local_shape(shape, placement, comm->size(), comm->rank());
  COHORT_CHECK_KIND(kInvalidArgument, local.sizes().vec() == expected, "DTensor::from_local: rank ", comm->rank(),
                    "'s local tensor has shape ", detail::str(local.sizes()), ", its ", placement.str(), " part of ",
                    detail::str(c10::IntArrayRef(shape)), " over ", comm->size(), " rank(s) is ",
                    detail::str(c10::IntArrayRef(expected)));
  return DTensor(std::move(local), std::move(comm), placement, std::move(shape));
}

DTensor DTensor::distribute(const torch::Tensor& full, std::shared_ptr<Comm> comm, Placement placement) {
  COHORT_CHECK_KIND(kInvalidArgument, comm != nullptr && full.defined(),
                    "DTensor::distribute: a defined tensor and a Comm");
  COHORT_CHECK_KIND(kInvalidArgument, !placement.is_partial(),
                    "DTensor::distribute: Partial(sum) is not a layout of a whole tensor (summands come from a "
                    "computation); use Shard(dim) or Replicate()");
  placement = normalized(placement, full.dim(), "DTensor::distribute");
  const auto shape = full.sizes().vec();
  torch::Tensor local = placement.is_shard() ? detail::redistribute_autograd(full, comm, shape, Placement::replicate(),
                                                                             placement, placement)
                                             : full;
  return DTensor(std::move(local), std::move(comm), placement, shape);
}

DTensor DTensor::redistribute(Placement to, std::optional<Placement> grad_placement) const {
  COHORT_CHECK_KIND(kInvalidArgument, defined(), "DTensor::redistribute of an empty DTensor");
  to = normalized(to, static_cast<int64_t>(shape_.size()), "DTensor::redistribute");
  const Placement grad = normalized(grad_placement.value_or(to.is_partial() ? Placement::replicate() : to),
                                    static_cast<int64_t>(shape_.size()), "DTensor::redistribute's grad_placement");
  if (to == placement_ && grad == to) return *this;
  return DTensor(detail::redistribute_autograd(local_, comm_, shape_, placement_, to, grad), comm_, to, shape_);
}

torch::Tensor DTensor::full_tensor(std::optional<Placement> grad_placement) const {
  return redistribute(Placement::replicate(), grad_placement).to_local();
}

}  // namespace cohort
