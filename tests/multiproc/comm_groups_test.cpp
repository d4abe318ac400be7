// Process groups on 4 real rank processes: Comm::split and new_group (membership and order, groups of
// one, overlapping and nested groups, two groups running different collectives at the same time, also
// from two threads of one rank), and their failures: a mismatch, a timeout and a dead rank inside a
// group are named with world and group rank, and ranks that disagree on new_group are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "comm/comm_access.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_groups_test {

using ::testing::HasSubstr;
using cohort::ReduceOp;
using cohort::testing::report;
using cohort::testing::run_ranks;
using Clock = std::chrono::steady_clock;

namespace {

template <typename Fn>
void expect_error(Fn fn) {
  const auto start = Clock::now();
  try {
    fn();
    ADD_FAILURE() << "expected a cohort::Error";
  } catch (const cohort::Error& e) {
    report(e.what());
    report("seconds=" + std::to_string(std::chrono::duration<double>(Clock::now() - start).count()));
  }
}

double seconds_of(const cohort::testing::RankResult& r) {
  for (const auto& line : r.reports)
    if (line.rfind("seconds=", 0) == 0) return std::stod(line.substr(8));
  return -1;
}

cohort::testing::RanksOptions short_timeout(int seconds, bool all_pass = true) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = std::to_string(seconds);
  options.deadline = std::chrono::seconds(60);
  options.expect_all_pass = all_pass;
  return options;
}

// Rank 0 hosts the store that groups are made through and failures are reported in: every rank
// stays until all are done with it (a rank killed on purpose makes this barrier fail, which is fine).
void leave_together(cohort::Comm& world) {
  try {
    world.barrier();
  } catch (const cohort::Error&) {
  }
}

float sum_of_world_ranks(cohort::Comm& group) {
  float sum = 0;
  for (int r = 0; r < group.size(); ++r) sum += float(group.world_rank(r));
  return sum;
}

}  // namespace

TEST(Split, MembershipOrderAndUndefinedColor) {
  run_ranks(4, [](int rank, int) {
    auto& world = cohort::init().comm();
    // Color by parity, keys reversing the order: group rank 0 is the highest world rank.
    auto parity = world.split(rank % 2, -rank);
    ASSERT_TRUE(parity);
    EXPECT_EQ(parity->size(), 2);
    EXPECT_EQ(parity->rank(), rank < 2 ? 1 : 0);
    EXPECT_EQ(parity->world_rank(0), rank % 2 + 2);
    auto t = parity->allreduce(torch::full({3}, float(rank)));
    EXPECT_EQ(t[0].item<float>(), float(rank % 2 == 0 ? 0 + 2 : 1 + 3));
    // MPI_UNDEFINED: rank 3 joins nothing; the others form one group of 3.
    auto three = world.split(rank == 3 ? cohort::kUndefinedColor : 7, 0);
    EXPECT_EQ(bool(three), rank != 3);
    if (three) EXPECT_EQ(three->allreduce(torch::ones({1}))[0].item<float>(), 3.f);
    world.barrier();  // the world still works after making groups
  });
}

// Two groups of 2, one running allreduces and the other broadcasts and allgathers, at the same time;
// each group on shared memory (its ranks share this host) unless COHORT_SHM=0.
void two_groups_at_once(int rank, int) {
  auto world = cohort::init();
  auto low = world.new_group({0, 1}, cohort::GroupOptions().name("low"));
  auto high = world.new_group({3, 2}, cohort::GroupOptions().name("high"));  // any order: sorted
  ASSERT_EQ(bool(low), rank < 2);
  ASSERT_EQ(bool(high), rank >= 2);
  const char* shm = std::getenv("COHORT_SHM");
  EXPECT_EQ(cohort::detail::comm_impl(*(low ? low : high)).shm() != nullptr, !(shm && std::string(shm) == "0"));
  if (low) {
    EXPECT_EQ(low->name(), "low");
    for (int i = 0; i < 50; ++i) {
      auto t = low->allreduce(torch::full({1000}, float(rank + i)));
      ASSERT_EQ(t[999].item<float>(), float(1 + 2 * i));
    }
  } else {
    EXPECT_EQ(high->rank(), rank - 2);
    for (int i = 0; i < 50; ++i) {
      auto b = high->broadcast(torch::full({7}, float(rank * 10 + i)), 1);
      ASSERT_EQ(b[0].item<float>(), float(30 + i));
      auto g = high->allgather(torch::full({2}, int64_t(rank)));
      ASSERT_EQ(g[1][0].item<int64_t>(), 3);
    }
  }
  // Rank 0 hosts the store every group was set up through: the ranks leave together, as a job does.
  leave_together(world.comm());
}

TEST(NewGroup, TwoGroupsRunDifferentCollectivesAtTheSameTime) { run_ranks(4, two_groups_at_once); }

TEST(NewGroup, TwoGroupsAtTheSameTimeOnGloo) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_SHM"] = "0";
  run_ranks(4, two_groups_at_once, options);
}

TEST(NewGroup, RowsAndColumnsFromTwoThreadsAtOnce) {
  run_ranks(4, [](int rank, int) {
    auto& world = cohort::init().comm();
    auto row = world.split(rank / 2, rank);     // {0,1}, {2,3}
    auto column = world.split(rank % 2, rank);  // {0,2}, {1,3}
    std::thread other([&] {
      for (int i = 0; i < 40; ++i) {
        auto g = column->allgather(torch::full({3}, float(rank)));
        ASSERT_EQ(g[1][0].item<float>(), float(rank % 2 + 2));
      }
    });
    for (int i = 0; i < 40; ++i) {
      auto t = row->allreduce(torch::full({500}, float(rank)), ReduceOp::kMax);
      ASSERT_EQ(t[0].item<float>(), float(rank / 2 * 2 + 1));
    }
    other.join();
  });
}

TEST(NewGroup, OverlappingAndNestedGroups) {
  run_ranks(4, [](int rank, int) {
    auto& world = cohort::init().comm();
    auto first = world.new_group({0, 1, 2}, cohort::GroupOptions().name("first"));
    auto second = world.new_group({1, 2, 3});
    if (first) EXPECT_EQ(first->allreduce(torch::full({2}, float(rank)))[0].item<float>(), 3.f);
    if (second) {
      EXPECT_EQ(second->name(), "group 1");
      EXPECT_EQ(second->allreduce(torch::full({2}, float(rank)))[0].item<float>(), 6.f);
    }
    if (!first) return leave_together(world);
    // Split a group: group ranks 0 and 2 of 'first' (world 0 and 2) and group rank 1 alone.
    auto nested = first->split(first->rank() % 2, 0);
    ASSERT_TRUE(nested);
    EXPECT_EQ(nested->name(), "first/group 0." + std::to_string(first->rank() % 2));
    EXPECT_EQ(nested->size(), rank == 1 ? 1 : 2);
    EXPECT_EQ(sum_of_world_ranks(*nested), rank == 1 ? 1.f : 2.f);
    EXPECT_EQ(nested->allreduce(torch::full({2}, float(rank)))[1].item<float>(), rank == 1 ? 1.f : 2.f);
    leave_together(world);
  });
}

TEST(NewGroup, GroupOfOneMakesEveryCollectiveANoOp) {
  run_ranks(4, [](int rank, int) {
    auto& world = cohort::init().comm();
    auto alone = world.split(rank, 0);
    ASSERT_EQ(alone->size(), 1);
    EXPECT_EQ(alone->world_rank(0), rank);
    auto t = torch::full({3}, float(rank));
    alone->allreduce(t, ReduceOp::kAvg);
    EXPECT_EQ(t[0].item<float>(), float(rank));
    EXPECT_EQ(alone->allgather(t).sizes(), (std::vector<int64_t>{1, 3}));
    alone->broadcast(t, 0);
    EXPECT_TRUE(torch::equal(alone->reduce_scatter(t), t));
    EXPECT_TRUE(torch::equal(alone->alltoall(t), t));
    EXPECT_TRUE(torch::equal(alone->allgather_v(t), t));
    alone->barrier();
    auto only_zero = world.new_group({0});
    EXPECT_EQ(bool(only_zero), rank == 0);
    if (only_zero) EXPECT_EQ(only_zero->allreduce(t)[0].item<float>(), 0.f);
  });
}

TEST(GroupFailures, MismatchInsideAGroupNamesWorldAndGroupRanks) {
  auto results = run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    auto pair = world.new_group({2, 3}, cohort::GroupOptions().name("pair"));
    if (pair) expect_error([&] { pair->allreduce(torch::ones({3 + rank - 2})); });
    leave_together(world.comm());
  }, short_timeout(60));
  for (int rank = 2; rank < 4; ++rank) {
    const auto& r = results[rank];
    ASSERT_FALSE(r.reports.empty()) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("desync) at collective #0 in group 'pair'"));
    EXPECT_THAT(r.reports[0], HasSubstr("rank 2 (group rank 0 of 'pair'): #0 allreduce(sum) float32 [3]"));
    EXPECT_THAT(r.reports[0], HasSubstr("rank 3 (group rank 1 of 'pair'): #0 allreduce(sum) float32 [4]"));
    EXPECT_LT(seconds_of(r), 5.0);
  }
}

TEST(GroupFailures, RanksThatDisagreeOnNewGroupAreNamed) {
  auto results = run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    expect_error([&] { world.new_group(rank == 3 ? std::vector<int>{0, 2} : std::vector<int>{0, 1}); });
    leave_together(world.comm());
  }, short_timeout(60));
  for (const auto& r : results) {
    ASSERT_FALSE(r.reports.empty()) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("new_group #0: ranks disagree on the members"));
    EXPECT_THAT(r.reports[0], HasSubstr("ranks 0, 1, 2 list [0, 1]; rank 3 lists [0, 2]. Every rank must call "
                                        "new_group with the same list"));
  }
}

TEST(GroupFailures, TimeoutInAGroupNamesTheMissingRankBothWays) {
  auto results = run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    auto trio = world.new_group({1, 2, 3}, cohort::GroupOptions().name("trio").timeout(std::chrono::seconds(2)));
    if (trio) EXPECT_EQ(trio->timeout(), std::chrono::milliseconds(2000));
    if (rank == 3) std::this_thread::sleep_for(std::chrono::seconds(6));  // never calls the collective
    else if (trio) expect_error([&] { trio->allreduce(torch::ones({8})); });
    leave_together(world.comm());
  }, short_timeout(60));
  for (int rank = 1; rank < 3; ++rank) {
    const auto& r = results[rank];
    ASSERT_FALSE(r.reports.empty()) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("collective #0 allreduce(sum) float32 [8] in group 'trio' timed out after "
                                        "2000 ms: rank 3 (group rank 2 of 'trio') never arrived"));
  }
}

TEST(GroupFailures, DeadRankInAGroupIsNamedBothWays) {
  auto results = run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    auto odd = world.new_group({1, 3}, cohort::GroupOptions().name("odd"));
    if (odd) {
      odd->barrier();
      if (rank == 3) ::kill(::getpid(), SIGKILL);
      expect_error([&] {
        for (int i = 0; i < 100000; ++i) odd->allreduce(torch::ones({1 << 14}));
      });
    }
    leave_together(world.comm());
  }, short_timeout(120, false));
  EXPECT_EQ(results[3].signal, SIGKILL);
  const auto& r = results[1];
  EXPECT_TRUE(r.passed) << r.output;
  ASSERT_FALSE(r.reports.empty()) << r.output;
  EXPECT_THAT(r.reports[0], HasSubstr("in group 'odd' failed: rank 3 (group rank 1 of 'odd') died"));
  EXPECT_LT(seconds_of(r), 10.0);
}

}  // namespace comm_groups_test
