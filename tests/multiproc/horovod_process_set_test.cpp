// hvd's process sets (Horovod's dynamic ones, hvd::add_process_set): on 3 ranks the sets {0, 1} and {2}
// run their operations at the same time, each negotiated among its own ranks, alongside the global
// set's; a rank outside a set and a broadcast root outside it are named in one-line errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>

#include "cohort/horovod.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace horovod_process_set_test {

namespace hvd = cohort::hvd;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

// Ranks 0 and 1 on the pair: named reductions in opposite orders, a broadcast from world rank 1, a
// ragged allgather, and a global operation submitted between them in a different place on each rank.
void on_the_pair(const hvd::ProcessSet& pair, int rank) {
  const auto sum = hvd::AllreduceOptions().op(hvd::Sum).process_set(pair);
  std::vector<std::string> names = {"p.a", "p.b", "p.c"};
  if (rank == 1) std::reverse(names.begin(), names.end());
  std::map<std::string, hvd::Handle> handles;
  for (const auto& name : names) {
    handles[name] = hvd::allreduce_async(torch::full({2}, double(rank + 1)), hvd::AllreduceOptions(sum).name(name));
    if (name == "p.b") handles["g"] = hvd::allreduce_async(torch::full({1}, double(rank)), "g", hvd::Sum);
  }
  for (const auto& name : names) EXPECT_TRUE(torch::equal(hvd::synchronize(handles[name]), torch::full({2}, 3.0)));
  EXPECT_EQ(hvd::synchronize(handles["g"]).item<double>(), 3.0) << "0 + 1 + 2 over the global set";
  auto from_1 = hvd::broadcast(torch::full({2}, double(rank)), 1, "p.from1", pair);
  EXPECT_TRUE(torch::equal(from_1, torch::full({2}, 1.0)));
  auto gathered = hvd::allgather(torch::full({rank + 1}, double(rank)), "p.gather", pair);
  EXPECT_TRUE(torch::equal(gathered, torch::tensor({0.0, 1.0, 1.0})));
}

// Rank 2 alone in its set: its operations return its own values, and ten of them need nobody else.
void alone_in_its_set(const hvd::ProcessSet& alone) {
  auto g = hvd::allreduce_async(torch::full({1}, 2.0), "g", hvd::Sum);
  for (int i = 0; i < 10; ++i) {
    auto mine = hvd::allreduce(torch::full({2}, 5.0), hvd::AllreduceOptions().name("s" + std::to_string(i))
                                                          .op(hvd::Sum).process_set(alone));
    EXPECT_TRUE(torch::equal(mine, torch::full({2}, 5.0)));
  }
  EXPECT_EQ(hvd::synchronize(g).item<double>(), 3.0);
  EXPECT_EQ(error_of([&] { hvd::broadcast(torch::ones({1}), 0, "b", alone); }),
            "[rank 2/3] hvd::broadcast('b'): root_rank 0 is not in process set 2");
}

}  // namespace

TEST(HvdProcessSet, PairAndSingleOnThreeRanksRunAtOnce) {
  run_ranks(3, [](int rank, int) {
    hvd::init();
    auto pair = hvd::add_process_set({1, 0});
    auto alone = hvd::add_process_set({2});
    EXPECT_EQ(pair.id(), 1);
    EXPECT_EQ(alone.id(), 2);
    EXPECT_EQ(pair.ranks(), (std::vector<int>{0, 1}));
    EXPECT_EQ(hvd::global_process_set.size(), 3);
    EXPECT_EQ(pair.included(), rank < 2);
    EXPECT_EQ(pair.rank(), rank < 2 ? rank : -1);
    EXPECT_EQ(alone.rank(), rank == 2 ? 0 : -1);
    if (rank < 2) {
      on_the_pair(pair, rank);
      const auto outside = hvd::AllreduceOptions().name("x").process_set(alone);
      EXPECT_EQ(error_of([&] { hvd::allreduce(torch::ones({1}), outside); }),
                "[rank " + std::to_string(rank) + "/3] hvd::allreduce('x'): this rank (" + std::to_string(rank) +
                    ") is not in process set 2 (ranks 2); only its ranks may call its operations");
    } else {
      alone_in_its_set(alone);
    }
    // Every set done: the global set still pairs up.
    EXPECT_EQ(hvd::allreduce(torch::full({1}, double(rank)), "end", hvd::Sum).item<double>(), 3.0);
    EXPECT_EQ(error_of([] { hvd::add_process_set({0, 3}); }),
              "[rank " + std::to_string(rank) + "/3] hvd::add_process_set: rank 3 is not a rank of this world of 3");
    hvd::shutdown();
  });
}

}  // namespace horovod_process_set_test
