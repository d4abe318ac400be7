// HookFuture (a chain of collectives and continuations that DDP advances in bucket order) and the
// simple hooks: plain averaging allreduce, fp16 and bf16 compression (PyTorch's default_hooks). The
// compressed copy of each bucket is kept between steps, so a step allocates nothing.
#include <torch/torch.h>

#include <utility>

#include "cohort/comm_hooks.h"
#include "core/check.h"
#include "ddp/comm_hook_util.h"

namespace cohort {

HookFuture::HookFuture(std::vector<Work> works, Then then) : works_(std::move(works)), then_(std::move(then)) {}

void HookFuture::advance() {
  for (auto& work : works_) work.wait();
  works_.clear();
  if (!then_) return;
  Then then = std::move(then_);
  then_ = nullptr;
  *this = then();
}

void HookFuture::wait() {
  while (!done()) advance();
}

void CommHook::claim() {
  COHORT_CHECK_KIND(kInvalidArgument, !claimed_, "register_comm_hook: the ", name(),
                    " hook is already registered with a "
                    "DistributedDataParallel; a hook keeps per-bucket state, so make one hook per DDP");
  claimed_ = true;
}

namespace detail {

void average_in_place(torch::Tensor& tensor, int64_t divisor) {
  // As the reducer without a hook (reducer.cpp): multiply by 1/divisor, so that the vanilla steps of a
  // hook give the very bits of plain DDP.
  if (divisor != 1) tensor.mul_(1.0 / double(divisor));
}

HookFuture allreduce_average(Comm& comm, const GradBucket& bucket) {
  torch::Tensor buffer = bucket.buffer;
  average_in_place(buffer, bucket.divisor);
  return HookFuture({comm.allreduce_async(buffer, ReduceOp::kSum)}, nullptr);
}

}  // namespace detail

namespace {

class AllreduceHook : public CommHook {
 public:
  HookFuture run(Comm& comm, const GradBucket& bucket) override { return detail::allreduce_average(comm, bucket); }
  std::string name() const override { return "allreduce"; }
};

// fp16_compress_hook / bf16_compress_hook: the bucket cast to `dtype` and divided there (before the
// sum, so it cannot overflow where the mean fits), summed in that dtype, cast back in place.
class CastHook : public CommHook {
 public:
  explicit CastHook(torch::ScalarType dtype) : dtype_(dtype) {}

  HookFuture run(Comm& comm, const GradBucket& bucket) override {
    if (size_t(bucket.index) >= compressed_.size()) compressed_.resize(size_t(bucket.index) + 1);
    torch::Tensor& compressed = compressed_[size_t(bucket.index)];
    const auto options = bucket.buffer.options().dtype(dtype_);
    if (!compressed.defined() || compressed.numel() != bucket.buffer.numel() ||
        compressed.device() != bucket.buffer.device())
      compressed = torch::empty({bucket.buffer.numel()}, options);
    torch::NoGradGuard no_grad;
    compressed.copy_(bucket.buffer);
    compressed.div_(bucket.divisor);
    Work work = comm.allreduce_async(compressed, ReduceOp::kSum);
    return HookFuture({std::move(work)}, [compressed, out = bucket.buffer]() mutable {
      out.copy_(compressed);
      return HookFuture();
    });
  }
  std::string name() const override { return dtype_ == torch::kHalf ? "fp16_compress" : "bf16_compress"; }

 private:
  torch::ScalarType dtype_;
  std::vector<torch::Tensor> compressed_;  // by bucket index
};

}  // namespace

namespace comm_hooks {

std::shared_ptr<CommHook> allreduce() { return std::make_shared<AllreduceHook>(); }
std::shared_ptr<CommHook> fp16_compress() { return std::make_shared<CastHook>(torch::kHalf); }
std::shared_ptr<CommHook> bf16_compress() { return std::make_shared<CastHook>(torch::kBFloat16); }

}  // namespace comm_hooks
}  // namespace cohort
