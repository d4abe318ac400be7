// alltoall (even and uneven splits) and the variable-size allgather on 2 and 4 real rank processes,
// against closed forms: row block j that rank r sends holds r * 100 + j, so what arrives from rank j
// at rank r is j * 100 + r. Uneven splits include empty blocks; split sizes that disagree between
// ranks fail on every rank with one message instead of corrupting memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_alltoall_test {

using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

// Rows rank `from` sends to rank `to` in the uneven case (0, 1 or 2; some blocks empty).
int64_t rows(int from, int to) { return (from + 2 * to) % 3; }

void even_and_uneven(int rank, int size) {
  auto& comm = cohort::init().comm();
  // Even: two rows of 3 per destination.
  auto input = torch::empty({size * 2, 3});
  for (int j = 0; j < size; ++j) input.narrow(0, 2 * j, 2).fill_(rank * 100 + j);
  auto output = comm.alltoall(input);
  ASSERT_EQ(output.sizes(), input.sizes());
  for (int j = 0; j < size; ++j) EXPECT_TRUE(output.narrow(0, 2 * j, 2).eq(j * 100 + rank).all().item<bool>()) << j;
  // Uneven, with the receive sizes exchanged by alltoall itself.
  std::vector<int64_t> send_rows;
  std::vector<torch::Tensor> blocks;
  for (int j = 0; j < size; ++j) {
    send_rows.push_back(rows(rank, j));
    blocks.push_back(torch::full({rows(rank, j), 2}, int64_t(rank * 100 + j)));
  }
  auto got = comm.alltoall(torch::cat(blocks), send_rows);
  std::vector<torch::Tensor> expected;
  for (int j = 0; j < size; ++j) expected.push_back(torch::full({rows(j, rank), 2}, int64_t(j * 100 + rank)));
  EXPECT_TRUE(torch::equal(got, torch::cat(expected))) << got;
  // alltoall_single with both split lists given, into a bfloat16 output.
  std::vector<int64_t> recv_rows;
  for (int j = 0; j < size; ++j) recv_rows.push_back(rows(j, rank));
  auto out = torch::empty({torch::cat(expected).size(0), 2}, torch::kBFloat16);
  comm.alltoall_single(out, torch::cat(blocks).to(torch::kBFloat16),
                       cohort::AlltoallSplits().input(send_rows).output(recv_rows));
  EXPECT_TRUE(torch::equal(out, torch::cat(expected).to(torch::kBFloat16)));  // 301 is not a bfloat16: both round
}

void variable_allgather(int rank, int size) {
  auto& comm = cohort::init().comm();
  // Rank r has r rows (rank 0 none) of [r, r]: the result is rank 1's row, rank 2's two rows, ...
  auto mine = torch::full({rank, 2}, float(rank));
  auto all = comm.allgather_v(mine);
  ASSERT_EQ(all.size(0), size * (size - 1) / 2);
  int64_t row = 0;
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < r; ++i, ++row) EXPECT_EQ(all[row][1].item<float>(), float(r)) << row;
  // Trailing dimensions that differ are a desync, named with each rank's padded shape.
  auto bad = torch::zeros({1, 2 + rank});
  EXPECT_THAT(error_of([&] { comm.allgather_v(bad); }), HasSubstr("collective mismatch (desync)"));
}

}  // namespace

class Alltoall : public ::testing::TestWithParam<int> {};

TEST_P(Alltoall, EvenAndUnevenEqualTheClosedForm) { run_ranks(GetParam(), even_and_uneven); }
TEST_P(Alltoall, VariableSizeAllgatherConcatenatesInRankOrder) { run_ranks(GetParam(), variable_allgather); }

INSTANTIATE_TEST_SUITE_P(Ranks, Alltoall, ::testing::Values(2, 4));

TEST(AlltoallErrors, SplitSizesThatDisagreeFailOnEveryRank) {
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    // Each rank sends one row to each, but rank 1 expects two rows from rank 0.
    auto output = torch::empty({rank == 1 ? 3 : 2, 4});
    std::vector<int64_t> recv_rows = rank == 1 ? std::vector<int64_t>{2, 1} : std::vector<int64_t>{1, 1};
    auto message = error_of([&] {
      comm.alltoall_single(output, torch::ones({2, 4}),
                           cohort::AlltoallSplits().input({1, 1}).output(recv_rows));
    });
    EXPECT_THAT(message, HasSubstr("alltoall: split sizes disagree between ranks:"));
    if (rank == 1) EXPECT_THAT(message, HasSubstr("rank 0 sends 1 rows here but output split 0 is 2"));
    // Nothing was poisoned: the Comm still works.
    EXPECT_EQ(comm.allreduce(torch::ones({1}))[0].item<float>(), 2.f);
  });
}

}  // namespace comm_alltoall_test
