// cross_entropy_parallel (cohort/tensor_parallel.h): Megatron's vocabulary-parallel cross-entropy.
// Each rank holds the logits of its share of the vocabulary; the softmax's maximum and its sum of
// exponentials are all-reduced (a few numbers per position), the target's logit comes from the rank
// that holds it. The all-reduced sums are Partial -> Replicate redistributions, whose backward is
// the identity: each rank's logits get their own softmax share minus the one-hot target.
#include <limits>

#include "core/check.h"
#include "tp/split.h"

namespace cohort::tp {

torch::Tensor cross_entropy_parallel(const DTensor& logits, const torch::Tensor& targets, int64_t ignore_index) {
  COHORT_CHECK_KIND(kInvalidArgument, logits.defined() && !logits.shape().empty(),
                    "cross_entropy_parallel: logits split by vocabulary (a DTensor)");
  const int64_t last = static_cast<int64_t>(logits.shape().size()) - 1;
  COHORT_CHECK_KIND(kInvalidArgument, logits.placement() == Placement::shard(last), "cross_entropy_parallel: logits ",
                    logits.placement().str(), "; loss parallel takes them split by vocabulary, Shard(", last, ")");
  const auto& comm = logits.comm();
  const int64_t vocab = logits.shape().back();
  const auto [first, count] = shard_range(vocab, comm->size(), comm->rank());
  const torch::Tensor local = logits.to_local().reshape({-1, count});
  const torch::Tensor t = targets.reshape({-1}).to(torch::kLong);
  COHORT_CHECK_KIND(kInvalidArgument, t.numel() == local.size(0), "cross_entropy_parallel: ", t.numel(),
                    " target(s) for ", local.size(0), " position(s) of logits");
  torch::Tensor peak = count > 0
                           ? std::get<0>(local.detach().max(1))
                           : torch::full({local.size(0)}, -std::numeric_limits<double>::infinity(), local.options());
  peak = comm->allreduce(peak.contiguous(), ReduceOp::kMax);  // the softmax's shift: no gradient
  const torch::Tensor z = local - peak.unsqueeze(1);
  auto summed = [&](const torch::Tensor& part) {
    return DTensor::from_local(part, comm, Placement::partial()).full_tensor();
  };
  const torch::Tensor sum_exp = summed(z.exp().sum(1));
  const torch::Tensor mine = (t >= first) & (t < first + count) & (t != ignore_index);
  const torch::Tensor index = torch::where(mine, t - first, torch::zeros_like(t));
  const torch::Tensor picked = count > 0 ? z.gather(1, index.unsqueeze(1)).squeeze(1) * mine.to(z.dtype())
                                         : torch::zeros({local.size(0)}, z.options());
  const torch::Tensor target_z = summed(picked);
  const torch::Tensor valid = (t != ignore_index).to(z.dtype());
  return ((sum_exp.log() - target_z) * valid).sum() / valid.sum();
}

}  // namespace cohort::tp
