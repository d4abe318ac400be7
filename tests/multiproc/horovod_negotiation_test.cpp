// cohort::hvd's operations matched by name (src/horovod/controller.h, note "negotiation"): ranks that
// submit named operations in different orders (reversed, shuffled with fixed seeds, mixed with unnamed
// ones that keep their order among themselves) all get the right results, step after step (the
// response cache); a name with different shapes on two ranks fails naming both calls; plus the cache
// and the round's pure pieces alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <random>
#include <regex>

#include "cohort/horovod.h"
#include "horovod/response_cache.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace horovod_negotiation_test {

namespace hvd = cohort::hvd;
using cohort::testing::error_of;
using cohort::testing::run_ranks;

namespace {

// Operation k: a Sum allreduce of k + 1 values of (rank + 1) * (k + 1), so its result names k.
struct Named {
  int k;
  hvd::Handle handle = -1;
};

torch::Tensor input(int k, int rank) { return torch::full({k + 1}, double((rank + 1) * (k + 1))); }

void expect_result(const torch::Tensor& got, int k, int n, const std::string& what) {
  const double want = double(k + 1) * n * (n + 1) / 2;
  EXPECT_TRUE(torch::equal(got, torch::full({k + 1}, want))) << what << " " << k << ": got " << got;
}

// Submits the named operations in `order`, then waits for them in `wait_order`, checking each.
void run_named(const std::vector<int>& order, const std::vector<int>& wait_order, int rank, int n,
               const std::string& prefix) {
  std::map<int, hvd::Handle> handles;
  for (int k : order) handles[k] = hvd::allreduce_async(input(k, rank), prefix + std::to_string(k), hvd::Sum);
  for (int k : wait_order) expect_result(hvd::synchronize(handles[k]), k, n, prefix);
}

}  // namespace

TEST(HvdNegotiation, OperationsInReversedOrderOnOneRank) {
  run_ranks(2, [](int rank, int n) {
    hvd::init();
    std::vector<int> order = {0, 1, 2, 3, 4, 5};
    if (rank == 1) std::reverse(order.begin(), order.end());
    for (int step = 0; step < 3; ++step) run_named(order, order, rank, n, "reversed.");  // steps 2, 3: cached
    // Other kinds too: a broadcast and a ragged allgather, submitted in opposite orders.
    hvd::Handle from_1, gathered;
    auto broadcast = [&] { from_1 = hvd::broadcast_async(torch::full({2}, double(rank)), 1, "from.1"); };
    auto gather = [&] { gathered = hvd::allgather_async(torch::full({rank + 1}, double(rank)), "gathered"); };
    if (rank == 0) {
      broadcast();
      gather();
    } else {
      gather();
      broadcast();
    }
    EXPECT_TRUE(torch::equal(hvd::synchronize(from_1), torch::full({2}, 1.0)));
    EXPECT_TRUE(torch::equal(hvd::synchronize(gathered), torch::tensor({0.0, 1.0, 1.0})));
    hvd::shutdown();
  });
}

TEST(HvdNegotiation, RandomOrdersOnThreeRanksWithFixedSeeds) {
  run_ranks(3, [](int rank, int n) {
    hvd::init();
    std::mt19937 random(1234 + rank);  // each rank its own order, the same on every run
    std::vector<int> order(12);
    for (int k = 0; k < 12; ++k) order[k] = k;
    for (int step = 0; step < 4; ++step) {
      std::shuffle(order.begin(), order.end(), random);
      auto wait_order = order;
      std::shuffle(wait_order.begin(), wait_order.end(), random);
      run_named(order, wait_order, rank, n, "shuffled.");
    }
    hvd::shutdown();
  });
}

TEST(HvdNegotiation, UnnamedOperationsKeepTheirOrderAmongNamedOnesInAnyOrder) {
  run_ranks(3, [](int rank, int n) {
    hvd::init();
    // Unnamed operation u reduces u + 10 + rank: the sum is 3 (u + 10) + 3 on 3 ranks.
    std::vector<std::pair<bool, int>> calls;  // (named, index)
    for (int u = 0; u < 4; ++u) calls.push_back({false, u});
    for (int k = 0; k < 4; ++k) calls.push_back({true, k});
    std::mt19937 random(77 + rank);
    std::shuffle(calls.begin(), calls.end(), random);
    // Unnamed ones must keep their order among themselves: sort them back into place.
    std::vector<int> unnamed_at;
    for (size_t i = 0; i < calls.size(); ++i)
      if (!calls[i].first) unnamed_at.push_back(int(i));
    for (size_t u = 0; u < unnamed_at.size(); ++u) calls[unnamed_at[u]].second = int(u);
    std::map<std::pair<bool, int>, hvd::Handle> handles;
    for (const auto& [named, i] : calls)
      handles[{named, i}] = named ? hvd::allreduce_async(input(i, rank), "mixed." + std::to_string(i), hvd::Sum)
                                  : hvd::allreduce_async(torch::full({2}, double(i + 10 + rank)), "", hvd::Sum);
    for (int u = 3; u >= 0; --u)
      EXPECT_TRUE(torch::equal(hvd::synchronize(handles[{false, u}]), torch::full({2}, 3.0 * (u + 10) + 3)))
          << "unnamed " << u;
    for (int k = 0; k < 4; ++k) expect_result(hvd::synchronize(handles[{true, k}]), k, n, "named");
    hvd::shutdown();
  });
}

TEST(HvdNegotiation, ANameWithOtherShapesOnTwoRanksFailsNamingBothCalls) {
  run_ranks(2, [](int rank, int) {
    hvd::init();
    auto y = hvd::allreduce_async(torch::ones({1}), "y");
    const std::string message = error_of([&] { hvd::allreduce(torch::ones({2 + rank}), "weights"); });
    std::smatch seq;  // the rounds before it are collectives of hvd's Comm too: read the number back
    ASSERT_TRUE(std::regex_search(message, seq, std::regex("#([0-9]+)"))) << message;
    const std::string s = seq[1];
    EXPECT_EQ(message, "[rank " + std::to_string(rank) + "/2] collective mismatch (desync) at collective #" + s +
                           " in group 'hvd': ranks called different collectives: rank 0 (group rank 0 of 'hvd'): #" +
                           s + " allreduce(avg) float32 [2] 'weights'; rank 1 (group rank 1 of 'hvd'): #" + s +
                           " allreduce(avg) float32 [3] 'weights'. Every rank must call the same collectives, in "
                           "the same order, with the same shapes and dtypes.");
    (void)y;
  });
}

TEST(HvdNegotiationPieces, TheCacheNumbersNamesInTheOrderAddedUpToItsCapacity) {
  hvd::detail::ResponseCache cache(2);
  cache.add("b");
  cache.add("a");
  cache.add("b");  // cached already: keeps its bit
  cache.add("c");  // full: not cached
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bit("b"), std::optional<size_t>(0));
  EXPECT_EQ(cache.bit("a"), std::optional<size_t>(1));
  EXPECT_EQ(cache.bit("c"), std::nullopt);
  EXPECT_EQ(cache.name(1), "a");
  hvd::detail::ResponseCache off(0);
  off.add("a");
  EXPECT_EQ(off.size(), 0u);
}

TEST(HvdNegotiationPieces, AgreedNamesAreThoseEveryRankHasInRankZerosOrder) {
  EXPECT_EQ(hvd::detail::agreed_names({{"c", "a", "b"}, {"b", "c"}, {"a", "b", "c", "d"}}),
            (std::vector<std::string>{"c", "b"}));
  EXPECT_EQ(hvd::detail::agreed_names({{"a"}, {}}), std::vector<std::string>{});
  const std::vector<std::string> names = {"fc1.weight", "", "a:b", "12:x"};
  const auto bytes = hvd::detail::encode_names(names);
  EXPECT_EQ(hvd::detail::decode_names(bytes.data(), bytes.size()), names);
  const std::string bad = "5:ab";
  EXPECT_EQ(error_of([&] { hvd::detail::decode_names(reinterpret_cast<const uint8_t*>(bad.data()), bad.size()); }),
            "hvd negotiation: a malformed name list at byte 1 of 4");
}

}  // namespace horovod_negotiation_test
