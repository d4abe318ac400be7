// NCCL through cohort's compat layer on one GPU (NCCL refuses two ranks on one device, so the world
// is one rank): every collective and dtype, the native flat reduce-scatter and all-gather, completion
// tracked until the GPU finished, and the ordered shutdown.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include "compat/c10d_compat.h"
#include "gpu/gpu_support.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace gpu_nccl_test {

namespace {

using cohort::detail::BackendConfig;

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16,
                                                torch::kInt,   torch::kLong,   torch::kByte};

c10::intrusive_ptr<cohort::detail::ProcessGroupBase> nccl_world_of_one() {
  BackendConfig config;
  config.store = c10::make_intrusive<c10d::HashStore>();
  config.rank = 0;
  config.size = 1;
  config.timeout = std::chrono::seconds(60);
  return cohort::detail::make_nccl(config);
}

// Waits as CommImpl does for CUDA tensors: until the GPU finished, not until the kernel was queued.
void wait_on_device(const c10::intrusive_ptr<c10d::Work>& work) {
  ASSERT_TRUE(work);
  while (!work->isCompleted()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  work->wait();
}

TEST(GpuNccl, EveryCollectiveAndDtypeOnAWorldOfOne) {
  COHORT_REQUIRE_GPU();
  torch::cuda::manual_seed(0);
  auto group = nccl_world_of_one();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  for (auto dtype : kDtypes) {
    auto t = torch::arange(6, cuda.dtype(torch::kDouble)).to(dtype);
    const auto before = t.clone();
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions sum;
    sum.reduceOp = c10d::ReduceOp::SUM;
    wait_on_device(group->allreduce(tensors, sum));
    EXPECT_TRUE(t.equal(before)) << "allreduce " << dtype;
    wait_on_device(group->broadcast(tensors, c10d::BroadcastOptions()));
    EXPECT_TRUE(t.equal(before)) << "broadcast " << dtype;
    auto gathered = torch::empty({6}, cuda.dtype(dtype));
    wait_on_device(cohort::detail::allgather_flat(*group, gathered, t));
    EXPECT_TRUE(gathered.equal(before)) << "allgather " << dtype;
    auto scattered = torch::empty({6}, cuda.dtype(dtype));
    wait_on_device(cohort::detail::reduce_scatter_flat(*group, scattered, t, c10d::ReduceOp::SUM));
    EXPECT_TRUE(scattered.equal(before)) << "reduce_scatter " << dtype;
  }
  cohort::detail::shutdown_backend(*group);
}

TEST(GpuNccl, CompletionWaitsForTheGpu) {
  COHORT_REQUIRE_GPU();
  auto group = nccl_world_of_one();
  // A long kernel queued before the collective on the current stream: NCCL's stream waits for it, so
  // isCompleted() must stay false until it ran; the future completes as soon as the work is queued.
  auto big = torch::randn({4096, 4096}, torch::TensorOptions().device(torch::kCUDA, 0));
  for (int i = 0; i < 20; ++i) big = big.matmul(big).div_(big.norm());
  std::vector<at::Tensor> tensors{big};
  auto work = group->allreduce(tensors, c10d::AllreduceOptions());
  const bool done_at_once = work->isCompleted();
  wait_on_device(work);
  EXPECT_TRUE(work->isCompleted());
  EXPECT_FALSE(done_at_once) << "the allreduce reported completion before the GPU ran the queued matmuls";
  cohort::detail::shutdown_backend(*group);
}

TEST(GpuNccl, SetDeviceMakesItCurrent) {
  COHORT_REQUIRE_GPU();
  cohort::detail::set_cuda_device(0);
  EXPECT_EQ(torch::empty({1}, torch::TensorOptions().device(torch::kCUDA)).device().index(), 0);
}

}  // namespace

}  // namespace gpu_nccl_test
