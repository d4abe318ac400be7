// Collectives on 2 and 4 real rank processes: every op, every dtype LibTorch reduces, and the size
// classes (empty, odd, non-contiguous, large), with rank-valued tensors and closed-form expectations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "comm/coalesced.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_collectives_test {

using cohort::ReduceOp;
using cohort::testing::run_ranks;

namespace {

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16,
                                                torch::kInt, torch::kLong, torch::kByte};

// Expected result of reducing the values 1..n with `op`.
double expected(ReduceOp op, int n) {
  double sum = 0, prod = 1;
  for (int v = 1; v <= n; ++v) sum += v, prod *= v;
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kAvg: return sum / n;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return n;
    case ReduceOp::kProduct: return prod;
  }
  return 0;
}

void every_op_and_dtype(int rank, int size) {
  auto& comm = cohort::init().comm();
  for (auto dtype : kDtypes) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      if (op == ReduceOp::kAvg && !torch::isFloatingType(dtype)) continue;
      auto t = torch::full({5}, rank + 1, torch::TensorOptions().dtype(dtype));
      comm.allreduce(t, op);
      EXPECT_TRUE(torch::allclose(t.to(torch::kDouble), torch::full({5}, expected(op, size), torch::kDouble)))
          << "allreduce(" << cohort::reduce_op_name(op) << ") " << dtype << " gave " << t;
    }
    // broadcast from the last rank, allgather, reduce_scatter
    auto b = torch::full({3, 2}, rank * 10 + 1, torch::TensorOptions().dtype(dtype));
    comm.broadcast(b, size - 1);
    EXPECT_EQ(b.to(torch::kDouble).sum().item<double>(), 6.0 * ((size - 1) * 10 + 1)) << dtype;
    auto gathered = comm.allgather(torch::full({2}, rank, torch::TensorOptions().dtype(dtype)));
    ASSERT_EQ(gathered.sizes(), (std::vector<int64_t>{size, 2}));
    for (int r = 0; r < size; ++r) EXPECT_EQ(gathered[r][1].item<double>(), r) << dtype;
    auto input = torch::arange(size * 3, torch::TensorOptions().dtype(torch::kDouble)).to(dtype);
    auto chunk = comm.reduce_scatter(input, ReduceOp::kSum);
    ASSERT_EQ(chunk.numel(), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(chunk[i].item<double>(), double(size * (rank * 3 + i))) << dtype;
  }
}

void size_classes(int rank, int size) {
  auto& comm = cohort::init().comm();
  auto empty = torch::empty({0});
  comm.allreduce(empty);
  EXPECT_EQ(empty.numel(), 0);
  auto odd = torch::full({7, 3}, float(rank));
  comm.allreduce(odd, ReduceOp::kMax);
  EXPECT_TRUE(odd.eq(size - 1).all().item<bool>());
  // Non-contiguous: a transposed view is reduced and written back through the view.
  auto base = torch::arange(24, torch::kFloat).view({4, 6}) * (rank + 1);
  auto view = base.t();
  ASSERT_FALSE(view.is_contiguous());
  comm.allreduce(view);
  EXPECT_TRUE(torch::equal(base, torch::arange(24, torch::kFloat).view({4, 6}) * (size * (size + 1) / 2)));
  auto strided = torch::zeros({10});
  auto every_other = strided.slice(0, 0, 10, 2);
  if (rank == 0) every_other.fill_(7);
  comm.broadcast(every_other, 0);
  EXPECT_EQ(strided.sum().item<float>(), 35.f);
  EXPECT_EQ(strided[1].item<float>(), 0.f);
  // Large: 64 MiB of float32.
  auto big = torch::ones({16 * 1024 * 1024});
  comm.allreduce(big);
  EXPECT_EQ(big[0].item<float>(), float(size));
  EXPECT_EQ(big[-1].item<float>(), float(size));
  EXPECT_EQ(big.sum().item<double>(), double(size) * big.numel());
}

void async_fusion_and_p2p(int rank, int size) {
  auto& comm = cohort::init().comm();
  std::vector<torch::Tensor> tensors;
  std::vector<cohort::Work> works;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back(torch::full({100 + i}, float(rank + i)));
    works.push_back(comm.allreduce_async(tensors.back()));
  }
  for (auto& w : works) w.wait();
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(tensors[i][0].item<float>(), float(size * (size - 1) / 2 + size * i));
  std::vector<torch::Tensor> small;
  for (int i = 0; i < 200; ++i) small.push_back(torch::full({16, 16}, float(i * (rank + 1))));
  comm.allreduce_fused(small, ReduceOp::kSum);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(small[i][3][5].item<float>(), float(i * size * (size + 1) / 2));
  comm.barrier();
  // A ring of send/recv.
  auto out = torch::full({4}, float(rank));
  auto in = torch::empty({4});
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (rank % 2 == 0) {
    comm.send(out, next);
    comm.recv(in, prev);
  } else {
    comm.recv(in, prev);
    comm.send(out, next);
  }
  EXPECT_EQ(in[0].item<float>(), float(prev));
  EXPECT_EQ(comm.sequence_number() > 0, true);
}

}  // namespace

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryOpAndDtype) { run_ranks(GetParam(), every_op_and_dtype); }
TEST_P(Collectives, SizeClasses) { run_ranks(GetParam(), size_classes); }
TEST_P(Collectives, AsyncFusionAndPointToPoint) { run_ranks(GetParam(), async_fusion_and_p2p); }

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 4));

TEST(BroadcastCoalesced, BucketsOfBoundedBytesCarryEveryTensor) {
  // Parameters at DDP and engine construction: buckets of at most 64 bytes here, so tensors share a
  // bucket, one is larger than any bucket, dtypes interleave and one is not contiguous.
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    const float mine = float(rank + 1);
    std::vector<torch::Tensor> tensors = {torch::full({3}, mine), torch::full({2, 2}, mine, torch::kDouble),
                                          torch::full({4}, mine), torch::full({40}, mine),
                                          torch::full({3, 5}, mine).t(), torch::full({1}, mine, torch::kDouble)};
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto first = tensors[i];
      while (first.dim() > 0) first = first[0];
      first.fill_(double(i));  // element [0, ...]: tells the tensors apart
    }
    cohort::detail::broadcast_coalesced(comm, tensors, /*root=*/1, /*bucket_bytes=*/64);
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto flat = tensors[i].reshape(-1);
      EXPECT_EQ(flat[0].item<double>(), double(i)) << "tensor " << i;
      EXPECT_TRUE(flat.narrow(0, 1, flat.numel() - 1).eq(2).all().item<bool>()) << "tensor " << i << " not rank 1's";
    }
  });
}

TEST(LoneProcess, IsAWorldOfOneWithoutSockets) {
  // Not under run_ranks: this process has no launcher variables.
  for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) unsetenv(v);
  auto world = cohort::init();
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  EXPECT_EQ(world.launcher(), "none");
  auto t = torch::full({3}, 5.f);
  world.comm().allreduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(t.eq(5).all().item<bool>());
  EXPECT_EQ(world.comm().allgather(t).sizes(), (std::vector<int64_t>{1, 3}));
  world.comm().barrier();
}

}  // namespace comm_collectives_test
