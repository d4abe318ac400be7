// cut_runs (src/tp/cut_runs.h): where a rank's part of a tensor cut by tensor parallelism lies in the
// whole tensor, checked against the part torch.chunk and shard_range cut from an arange of the shape.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "cohort/dtensor.h"
#include "support/errors.h"
#include "tp/cut_runs.h"

namespace tp_cut_runs_test {

using cohort::tp::detail::cut_runs;
using cohort::tp::detail::CutRun;

// Rank `rank`'s part of arange(shape) cut along `dim` into `fused` parts over `ranks`: each element is
// its own index in the whole tensor.
torch::Tensor part_of(const std::vector<int64_t>& shape, int64_t dim, int64_t fused, int ranks, int rank) {
  const torch::Tensor whole = torch::arange(c10::multiply_integers(shape), torch::kLong).view(shape);
  std::vector<torch::Tensor> pieces;
  for (const torch::Tensor& part : whole.chunk(fused, dim)) {
    const auto [first, count] = cohort::shard_range(part.size(dim), ranks, rank);
    pieces.push_back(part.narrow(dim, first, count));
  }
  return torch::cat(pieces, dim).flatten();
}

void expect_runs_match(const std::vector<int64_t>& shape, int64_t dim, int64_t fused, int ranks) {
  for (int rank = 0; rank < ranks; ++rank) {
    const torch::Tensor part = part_of(shape, dim, fused, ranks, rank);
    const auto* index = part.data_ptr<int64_t>();
    const int64_t n = part.numel();
    for (int64_t begin = 0; begin <= n; begin += std::max<int64_t>(1, n / 7))
      for (int64_t end = begin; end <= n; end += std::max<int64_t>(1, n / 5)) {
        const std::vector<CutRun> runs = cut_runs(shape, dim, fused, ranks, rank, begin, end);
        int64_t at = begin;
        for (size_t k = 0; k < runs.size(); ++k) {
          ASSERT_EQ(runs[k].local, at) << "rank " << rank << " run " << k;
          ASSERT_GT(runs[k].count, 0);
          for (int64_t i = 0; i < runs[k].count; ++i) ASSERT_EQ(index[at + i], runs[k].whole + i);
          if (k > 0) EXPECT_NE(runs[k - 1].whole + runs[k - 1].count, runs[k].whole) << "not merged";
          at += runs[k].count;
        }
        ASSERT_EQ(at, end) << "rank " << rank << " [" << begin << ", " << end << ")";
      }
  }
}

TEST(TpCutRuns, EveryElementOfEveryRanksPartIsFoundInTheWholeTensor) {
  expect_runs_match({6, 8}, 0, 1, 2);     // column-wise Linear weight: one run
  expect_runs_match({12, 5}, 0, 3, 2);    // fused q, k, v: a run per part
  expect_runs_match({8, 12}, 1, 1, 5);    // row-wise weight, uneven columns: a run per row
  expect_runs_match({4, 6, 5}, 1, 2, 2);  // a middle dimension, fused
  expect_runs_match({10}, 0, 1, 3);       // a bias
  expect_runs_match({3, 2}, 0, 1, 4);     // ranks beyond the rows: empty parts
  expect_runs_match({5, 4}, 1, 1, 1);     // one rank: the whole tensor, one run
  EXPECT_EQ(cut_runs({5, 4}, 1, 1, 1, 0, 0, 20).size(), 1u);
}

TEST(TpCutRuns, ACutThatDoesNotFitIsRefused) {
  using cohort::testing::error_of;
  EXPECT_THAT(
      error_of([] {
        cut_runs({6, 8}, 2, 1, 2, 0, 0, 1);
      }),
      ::testing::HasSubstr("a cut along dimension 2 into 1 fused part(s) does not fit a tensor of 2 dimension(s)"));
  EXPECT_THAT(error_of([] {
                cut_runs({7, 8}, 0, 3, 2, 0, 0, 1);
              }),
              ::testing::HasSubstr("into 3 fused part(s) does not fit a tensor of 2 dimension(s) of size 7"));
  EXPECT_THAT(error_of([] {
                cut_runs({6, 8}, 0, 1, 2, 1, 0, 25);
              }),
              ::testing::HasSubstr("elements [0, 25) are not in rank 1's part of 24 element(s)"));
}

}  // namespace tp_cut_runs_test
