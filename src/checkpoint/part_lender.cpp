// PartLender (see part_lender.h).
#include "checkpoint/part_lender.h"

#include <exception>
#include <utility>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "core/text.h"

namespace cohort::detail::ckpt {

PartLender::~PartLender() {
  try {
    give_back(/*changed=*/false);
  } catch (const std::exception& e) {
    COHORT_WARN("checkpoint: giving back part ", part_, " of a state failed: ", e.what());
  }
}

torch::Tensor PartLender::live(Stateful& owner, const StateTensor& t, const std::string& name) {
  if (t.part < 0) return t.tensor;
  if (owner_ != &owner || part_ != t.part) {
    give_back(changes_);
    std::vector<StateTensor> lent = owner.lend_part(t.part);
    owner_ = &owner;  // lent from here on: given back even when a check below fails
    part_ = t.part;
    for (StateTensor& l : lent) tensors_[l.name] = std::move(l.tensor);
  }
  const auto it = tensors_.find(t.name);
  COHORT_CHECK_KIND(kInvalidArgument, it != tensors_.end(), "tensor '", name, "' is in part ", t.part,
                    " of its state, but lend_part(", t.part, ") did not give it");
  const torch::Tensor& tensor = it->second;
  COHORT_CHECK_KIND(kInvalidArgument,
                    tensor.defined() && !tensor.is_meta() && tensor.scalar_type() == t.tensor.scalar_type() &&
                        tensor.sizes() == t.tensor.sizes(),
                    "tensor '", name, "': lend_part(", t.part, ") gave ",
                    tensor.defined() ? std::string(c10::toString(tensor.scalar_type())) + " " +
                                           shape_text(tensor.sizes().vec()) + (tensor.is_meta() ? " on meta" : "")
                                     : "an undefined tensor",
                    ", state_tensors() listed ", c10::toString(t.tensor.scalar_type()), " ",
                    shape_text(t.tensor.sizes().vec()));
  return tensor;
}

void PartLender::finish() { give_back(changes_); }

void PartLender::give_back(bool changed) {
  if (owner_ == nullptr) return;
  Stateful* owner = std::exchange(owner_, nullptr);
  tensors_.clear();  // no view of the part's memory outlives its lend
  owner->give_back_part(std::exchange(part_, -1), changed);
}

}  // namespace cohort::detail::ckpt
