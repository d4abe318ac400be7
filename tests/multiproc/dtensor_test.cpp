// cohort::DTensor on real rank processes: every redistribution between Shard(dim), Replicate and
// Partial gives the tensor a single process would hold (uneven torch.chunk shards on 3 ranks, the
// all-to-all of even ones), and each one's gradient is the gradient of the whole computation: the
// gradient of a loss summed over the ranks, compared with the same loss's gradient on one process.
// Bad layouts are one-line errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/dtensor.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace dtensor_test {

using cohort::DTensor;
using cohort::Placement;
using cohort::testing::error_of;
using cohort::testing::run_ranks;
using ::testing::HasSubstr;

namespace {

// The same tensor on every rank (a fixed seed per name).
torch::Tensor same(std::vector<int64_t> shape, int seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kDouble);
}

// This rank's torch.chunk of `full` along `dim`.
torch::Tensor chunk_of(const torch::Tensor& full, int64_t dim, int ranks, int rank) {
  const auto [first, count] = cohort::shard_range(full.size(dim), ranks, rank);
  return full.narrow(dim, first, count);
}

void expect_equal(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12)) << what << "\n" << got << "\n" << want;
}

}  // namespace

TEST(DTensor, ShardRangeIsTorchChunk) {
  EXPECT_EQ(cohort::shard_range(7, 3, 0), std::make_pair(int64_t{0}, int64_t{3}));
  EXPECT_EQ(cohort::shard_range(7, 3, 2), std::make_pair(int64_t{6}, int64_t{1}));
  EXPECT_EQ(cohort::shard_range(2, 4, 3), std::make_pair(int64_t{2}, int64_t{0}));  // torch.chunk: empty
  EXPECT_EQ(Placement::shard(1).str(), "Shard(1)");
  EXPECT_EQ(Placement::partial().str(), "Partial(sum)");
}

TEST(DTensor, EveryRedistributionGivesTheWholeTensorsPart) {
  run_ranks(3, [](int rank, int n) {
    auto comm = cohort::init().comm_ptr();
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{7, 5}, std::vector<int64_t>{6, 9}}) {
      const torch::Tensor full = same(shape, 1);
      const std::string tag = shape[0] == 7 ? "uneven " : "even ";
      for (int64_t from : {0, 1}) {
        const DTensor d = DTensor::distribute(full, comm, Placement::shard(from));
        expect_equal(d.to_local(), chunk_of(full, from, n, rank), tag + "distribute");
        expect_equal(d.full_tensor(), full, tag + "all-gather");
        expect_equal(d.redistribute(Placement::shard(1 - from)).to_local(), chunk_of(full, 1 - from, n, rank),
                     tag + "Shard -> Shard");
      }
      // Summands: rank r holds (r + 1) x full, the tensor is 6 x full.
      const DTensor partial = DTensor::from_local(full * (rank + 1), comm, Placement::partial());
      expect_equal(partial.full_tensor(), full * 6, tag + "all-reduce");
      expect_equal(partial.redistribute(Placement::shard(1)).to_local(), chunk_of(full * 6, 1, n, rank),
                   tag + "reduce-scatter");
    }
  });
}

// Each case: a loss summed over the ranks of what each computes from its part, against the gradient
// of the same sum on one process (`want`: the gradient of the whole tensor, or this rank's part).
TEST(DTensor, EachRedistributionsGradientIsTheWholeComputations) {
  run_ranks(3, [](int rank, int n) {
    auto comm = cohort::init().comm_ptr();
    const torch::Tensor full = same({7, 4}, 2);
    std::vector<torch::Tensor> weights;  // rank r's multiplier of what it holds
    for (int r = 0; r < n; ++r) weights.push_back(same({7, 4}, 10 + r));
    const torch::Tensor mine = weights[rank];
    const torch::Tensor all = weights[0] + weights[1] + weights[2];
    auto leaf = [](torch::Tensor t) { return t.clone().requires_grad_(true); };

    // Shard -> Replicate, the gradient arriving replicated (every rank computes the same): a cut.
    auto x = leaf(chunk_of(full, 0, n, rank));
    (DTensor::from_local(x, comm, Placement::shard(0), {7, 4}).full_tensor() * weights[0]).sum().backward();
    expect_equal(x.grad(), chunk_of(weights[0], 0, n, rank), "gather, replicated gradient");
    // Sequence parallel's gather: each rank's use differs, the gradients are summands (reduce-scatter).
    x = leaf(chunk_of(full, 0, n, rank));
    (DTensor::from_local(x, comm, Placement::shard(0), {7, 4}).full_tensor(Placement::partial()) * mine)
        .sum()
        .backward();
    expect_equal(x.grad(), chunk_of(all, 0, n, rank), "gather, partial gradient");
    // Megatron's f: identity forward, all-reduce backward.
    x = leaf(full);
    const DTensor replicated = DTensor::from_local(x, comm, Placement::replicate());
    (replicated.redistribute(Placement::replicate(), Placement::partial()).to_local() * mine).sum().backward();
    expect_equal(x.grad(), all, "copy to the tensor-parallel region");
    // Megatron's g: all-reduce forward, identity backward.
    x = leaf(full * (rank + 1));
    (DTensor::from_local(x, comm, Placement::partial()).full_tensor() * weights[0]).sum().backward();
    expect_equal(x.grad(), weights[0], "reduce from the tensor-parallel region");
    // Reduce-scatter forward, all-gather backward.
    x = leaf(full * (rank + 1));
    (DTensor::from_local(x, comm, Placement::partial()).redistribute(Placement::shard(0)).to_local() *
     chunk_of(weights[0], 0, n, rank))
        .sum()
        .backward();
    expect_equal(x.grad(), weights[0], "reduce-scatter");
    // A cut forward, all-gather backward: the whole gradient of a replicated input.
    x = leaf(full);
    (DTensor::distribute(x, comm, Placement::shard(1)).to_local() * chunk_of(weights[0], 1, n, rank)).sum().backward();
    expect_equal(x.grad(), weights[0], "cut");
    // Shard(0) -> Shard(1): its backward is Shard(1) -> Shard(0).
    x = leaf(chunk_of(full, 0, n, rank));
    (DTensor::from_local(x, comm, Placement::shard(0), {7, 4}).redistribute(Placement::shard(1)).to_local() *
     chunk_of(weights[0], 1, n, rank))
        .sum()
        .backward();
    expect_equal(x.grad(), chunk_of(weights[0], 0, n, rank), "Shard -> Shard");
  });
}

TEST(DTensor, BadLayoutsAreOneLineErrors) {
  run_ranks(2, [](int rank, int) {
    auto comm = cohort::init().comm_ptr();
    EXPECT_THAT(error_of([&] {
                  DTensor::from_local(torch::zeros({3, 2}), comm, Placement::shard(0), {8, 2});
                }),
                HasSubstr("DTensor::from_local: rank " + std::to_string(rank) +
                          "'s local tensor has shape [3, 2], its Shard(0) part of [8, 2] over 2 rank(s) is [4, 2]"));
    EXPECT_THAT(error_of([&] { DTensor::distribute(torch::zeros({4}), comm, Placement::shard(1)); }),
                HasSubstr("DTensor::distribute: Shard(1) of a tensor with 1 dimension(s)"));
    EXPECT_THAT(error_of([&] { DTensor::distribute(torch::zeros({4}), comm, Placement::partial()); }),
                HasSubstr("Partial(sum) is not a layout of a whole tensor"));
    const DTensor d = DTensor::distribute(torch::zeros({4}), comm, Placement::shard(-1));
    EXPECT_EQ(d.placement(), Placement::shard(0));
    EXPECT_THAT(error_of([&] { d.redistribute(Placement::partial()); }),
                HasSubstr("DTensor::redistribute: Shard(0) -> Partial(sum) is not a redistribution"));
  });
}

}  // namespace dtensor_test
