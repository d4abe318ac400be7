// The hierarchical transport (src/comm/hier_transport.*) on one host: COHORT_TEST_HOSTS_SPLIT=2 groups
// 4 rank processes as 2 hosts x 2 ranks, so each collective reduces within a "host" through its own
// segment, between the hosts over their own links, and broadcasts within the host
// again. Every result must equal, bit for bit, that order of reduction ((x0 + x1) + (x2 + x3); with 3
// hosts ((x0 + x1) + (x2 + x3)) + (x4 + x5)), and the
// exact sums of the flat path; a desync and a dead rank are named as on the flat path;
// COHORT_HIERARCHICAL=0 keeps flat Gloo; with one rank per "host" the links run alone. tests/cluster/job_shapes.sh
// runs it across real hosts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "comm/comm_access.h"
#include "comm/comm_impl.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_hier_test {

using ::testing::HasSubstr;
using cohort::ReduceOp;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

torch::Tensor input_of(int rank, int64_t n, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2000 + rank);
  if (torch::isFloatingType(dtype)) return torch::randn({n}, gen, torch::TensorOptions().dtype(dtype));
  return torch::randint(-1000, 1000, {n}, gen, torch::TensorOptions().dtype(dtype));
}

torch::Tensor combine(const torch::Tensor& a, const torch::Tensor& b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return torch::maximum(a, b);
    case ReduceOp::kMin: return torch::minimum(a, b);
    case ReduceOp::kProduct: return a * b;
    default: return a + b;
  }
}

// The hierarchy's order on `hosts` hosts x `per_host` ranks: each host's ranks in rank order, then the hosts.
torch::Tensor hier_reduction(int64_t n, torch::ScalarType dtype, ReduceOp op, int hosts = 2, int per_host = 2) {
  torch::Tensor all;
  for (int h = 0; h < hosts; ++h) {
    auto host = input_of(per_host * h, n, dtype);
    for (int l = 1; l < per_host; ++l) host = combine(host, input_of(per_host * h + l, n, dtype), op);
    all = h == 0 ? host : combine(all, host, op);
  }
  return op == ReduceOp::kAvg ? all.div_(per_host * hosts) : all;
}

cohort::testing::RanksOptions split_in(int hosts) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TEST_HOSTS_SPLIT"] = std::to_string(hosts);
  options.env["COHORT_SHM_BYTES"] = "4096";  // many chunks per collective
  options.env["COHORT_TIMEOUT"] = "60";
  return options;
}
cohort::testing::RanksOptions split_in_two() { return split_in(2); }

std::vector<std::string> words_of_file(const std::string& path) {
  std::ifstream file(path);
  return {std::istream_iterator<std::string>(file), std::istream_iterator<std::string>()};
}

// A TCP congestion control any process may choose other than the system's default ("" if none is).
std::string another_congestion_control() {
  const auto current = words_of_file("/proc/sys/net/ipv4/tcp_congestion_control");
  for (const std::string& name : words_of_file("/proc/sys/net/ipv4/tcp_allowed_congestion_control"))
    if (current.empty() || name != current[0]) return name;
  return "";
}

// How many of this process's TCP sockets use congestion control `name`.
int sockets_using(const std::string& name) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    char used[16] = {};
    socklen_t length = sizeof used;
    const int fd = std::stoi(entry.path().filename().string());
    if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, used, &length) == 0 && name == used) ++count;
  }
  return count;
}

void every_collective(int rank, int size) {
  auto& comm = cohort::init().comm();
  auto* hier = cohort::detail::comm_impl(comm).hier();
  ASSERT_NE(hier, nullptr) << "2 split hosts x 2 ranks: the hierarchical transport must be chosen";
  EXPECT_EQ(cohort::detail::comm_impl(comm).shm(), nullptr);
  EXPECT_EQ(hier->layout().hosts, 2);
  const int64_t before = hier->ops_done();
  int64_t ops = 0;
  // 70001: above 256 KiB, the leader reduces its host alone and the leaders run two rounds.
  for (int64_t n : {1, 3, 1025, 10007, 70001}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      auto t = input_of(rank, n, torch::kFloat);
      comm.allreduce(t, op);
      ++ops;
      EXPECT_TRUE(torch::equal(t, hier_reduction(n, torch::kFloat, op)))
          << "allreduce(" << cohort::reduce_op_name(op) << ") of " << n << " float32";
    }
  }
  // Exact dtypes: the flat path's sum, whatever the order.
  for (auto dtype : {torch::kLong, torch::kDouble}) {
    auto t = input_of(rank, 3001, torch::kLong).to(dtype);
    comm.allreduce(t, ReduceOp::kSum);
    ++ops;
    auto flat = input_of(0, 3001, torch::kLong);
    for (int r = 1; r < size; ++r) flat = flat + input_of(r, 3001, torch::kLong);
    EXPECT_TRUE(torch::equal(t, flat.to(dtype))) << dtype;
  }
  for (int64_t block : {1, 2500}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      auto out = comm.reduce_scatter(input_of(rank, block * size, torch::kFloat), op);
      ++ops;
      EXPECT_TRUE(torch::equal(out, hier_reduction(block * size, torch::kFloat, op).narrow(0, rank * block, block)))
          << "reduce_scatter(" << cohort::reduce_op_name(op) << ") block " << block;
    }
  }
  for (auto dtype : {torch::kFloat, torch::kBool}) {
    auto gathered = comm.allgather(input_of(rank, 1500, torch::kFloat).gt(0).to(dtype));
    ++ops;
    for (int r = 0; r < size; ++r)
      EXPECT_TRUE(torch::equal(gathered[r], input_of(r, 1500, torch::kFloat).gt(0).to(dtype))) << dtype;
  }
  for (int root = 0; root < size; ++root) {  // a leader and a non-leader root on each host
    auto b = input_of(rank, 2049, torch::kFloat);
    comm.broadcast(b, root);
    ++ops;
    EXPECT_TRUE(torch::equal(b, input_of(root, 2049, torch::kFloat))) << "root " << root;
  }
  EXPECT_EQ(hier->ops_done() - before, ops) << "a collective took another path";
  // What the hierarchy does not run (half reductions, all-to-all) goes through Gloo and still agrees.
  auto half = torch::full({5}, rank + 1, torch::kHalf);
  comm.allreduce(half);
  EXPECT_EQ(half[4].item<float>(), 10.f);
  EXPECT_EQ(comm.alltoall(torch::full({4}, float(rank)))[3].item<float>(), 3.f);
  EXPECT_EQ(hier->ops_done() - before, ops);
}

}  // namespace

TEST(Hier, EveryCollectiveIsTheHostThenLeaderReduction) { run_ranks(4, every_collective, split_in_two()); }

// Three hosts: the hosts' sums combine in host order (two hosts cannot tell, a + b being b + a), on
// the leaders in one round and in two (reduce-scatter, allgather).
TEST(Hier, ThreeHostsCombineInHostOrder) {
  run_ranks(6, [](int rank, int size) {
    auto& comm = cohort::init().comm();
    auto* hier = cohort::detail::comm_impl(comm).hier();
    ASSERT_NE(hier, nullptr);
    EXPECT_EQ(hier->layout().hosts, 3);
    // 28 B and 120 KB: the leaders in one round (up to 256 KiB); 1.2 MB: in two.
    // Sum and product combine in place (the rows before this host first), min copies: every host's place.
    for (int64_t n : {7, 30001, 300007}) {
      for (auto op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin}) {
        auto t = input_of(rank, n, torch::kFloat);
        comm.allreduce(t, op);
        EXPECT_TRUE(torch::equal(t, hier_reduction(n, torch::kFloat, op, 3)))
            << n << " float32 " << cohort::reduce_op_name(op);
      }
    }
    auto out = comm.reduce_scatter(input_of(rank, 999 * size, torch::kFloat), ReduceOp::kSum);
    EXPECT_TRUE(torch::equal(out, hier_reduction(999 * size, torch::kFloat, ReduceOp::kSum, 3).narrow(0, rank * 999, 999)));
  }, split_in(3));
}

// One rank per host (3 hosts x 1): no segment, every collective on the links alone, in host order;
// a desync between the hosts is still named; COHORT_TCP_CONGESTION sets the links' congestion control
// (theirs alone).
TEST(Hier, OneRankPerHostRunsTheLinksAlone) {
  auto options = split_in(3);
  const std::string congestion = another_congestion_control();  // "": the kernel allows only its default
  if (!congestion.empty()) options.env["COHORT_TCP_CONGESTION"] = congestion;
  const std::string timeline = "/tmp/cohort_hier_timeline_" + std::to_string(::getpid());
  options.env["COHORT_TIMELINE"] = timeline + ".json";  // recording: each op must still mark its agreement
  auto results = run_ranks(3, [congestion](int rank, int size) {
    auto& comm = cohort::init().comm();
    auto* hier = cohort::detail::comm_impl(comm).hier();
    ASSERT_NE(hier, nullptr) << "3 split hosts x 1 rank: the links must be chosen over Gloo";
    if (!congestion.empty()) EXPECT_EQ(sockets_using(congestion), 2) << "the links to the 2 other hosts use " << congestion;
    EXPECT_EQ(hier->layout().per_host, 1);
    const int64_t before = hier->ops_done();
    for (int64_t n : {7, 30001, 300007}) {  // one round (twice); two rounds
      for (auto op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        auto t = input_of(rank, n, torch::kFloat);
        comm.allreduce(t, op);
        EXPECT_TRUE(torch::equal(t, hier_reduction(n, torch::kFloat, op, 3, 1))) << n << " " << int(op);
      }
    }
    EXPECT_GE(hier->agreed_us(), 0) << "no agreement time: the timeline would drop every op";
    auto out = comm.reduce_scatter(input_of(rank, 999 * size, torch::kFloat), ReduceOp::kMax);
    EXPECT_TRUE(torch::equal(out, hier_reduction(999 * size, torch::kFloat, ReduceOp::kMax, 3, 1).narrow(0, rank * 999, 999)));
    auto gathered = comm.allgather(input_of(rank, 1500, torch::kFloat));
    for (int r = 0; r < size; ++r) EXPECT_TRUE(torch::equal(gathered[r], input_of(r, 1500, torch::kFloat))) << r;
    for (int root = 0; root < size; ++root) {
      auto b = input_of(rank, 2049, torch::kFloat);
      comm.broadcast(b, root);
      EXPECT_TRUE(torch::equal(b, input_of(root, 2049, torch::kFloat))) << "root " << root;
    }
    EXPECT_EQ(hier->ops_done() - before, 6 + 1 + 1 + size) << "a collective took another path";
    try {
      comm.allreduce(torch::ones({rank == 2 ? 100001 : 100000}));
      ADD_FAILURE() << "expected a cohort::Error";
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  }, options);
  std::filesystem::remove_all(timeline + ".json");
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 1u) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("collective mismatch (desync) at collective #11"));
    EXPECT_THAT(r.reports[0], HasSubstr("rank 2: #11 allreduce(sum) float32 [100001]"));
  }
}

TEST(Hier, OffWithCohortHierarchical0) {
  auto options = split_in_two();
  options.env["COHORT_HIERARCHICAL"] = "0";
  run_ranks(4, [](int rank, int) {
    auto& comm = cohort::init().comm();
    EXPECT_EQ(cohort::detail::comm_impl(comm).hier(), nullptr);
    EXPECT_EQ(cohort::detail::comm_impl(comm).shm(), nullptr);
    auto t = torch::full({3000}, rank + 1, torch::kLong);
    comm.allreduce(t);
    EXPECT_TRUE(t.eq(10).all().item<bool>());
  }, options);
}

TEST(Hier, BadSettingsAreRejected) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  const std::vector<std::array<const char*, 3>> cases = {
      {"COHORT_HIERARCHICAL", "2",
       "COHORT_HIERARCHICAL=2 is not a switch (0: flat Gloo across hosts, 1: hierarchical, the default) from 0 to 1"},
      {"COHORT_TEST_HOSTS_SPLIT", "-1", "COHORT_TEST_HOSTS_SPLIT=-1 is not a number of hosts from 0 to 4096"},
      {"COHORT_TCP_CONGESTION", "no-such-cc",
       "COHORT_TCP_CONGESTION=no-such-cc: the kernel refuses TCP congestion control 'no-such-cc' (No such file or "
       "directory; available: "}};
  for (const auto& [name, value, message] : cases) {
    setenv(name, value, 1);
    try {
      cohort::init();
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const cohort::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(message));
    }
    unsetenv(name);
  }
}

// Rank 3 calls another size than its host's leader: small (both ranks reduce) and from 256 KiB (the
// leader reduces alone), found in the host's first barrier.
void desync_within_host(int64_t n) {
  auto results = run_ranks(4, [n](int rank, int) {
    auto& comm = cohort::init().comm();
    ASSERT_NE(cohort::detail::comm_impl(comm).hier(), nullptr);
    comm.allreduce(torch::ones({2}));
    try {
      comm.allreduce(torch::ones({rank == 3 ? n + 1 : n}));
      ADD_FAILURE() << "expected a cohort::Error";
    } catch (const cohort::Error& e) {
      report(e.what());
    }
  }, split_in_two());
  const std::string call = "allreduce(sum) float32 [" + std::to_string(n) + "]";
  for (const auto& r : results) {
    ASSERT_FALSE(r.reports.empty()) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("collective mismatch (desync) at collective #1: ranks called different "
                                        "collectives: rank 0: #1 " + call + "; rank 1: #1 " + call + "; rank 2: #1 " +
                                        call + "; rank 3: #1 allreduce(sum) float32 [" + std::to_string(n + 1) + "]."));
  }
}

TEST(Hier, DesyncIsNamedAsOnTheFlatPath) { desync_within_host(4); }
TEST(Hier, DesyncOfALargeSumWithinAHostIsNamed) { desync_within_host(70000); }

// Desyncs the leaders must find between hosts (each host agreeing within itself): another size, in
// one round and above the one-round size (the disagreeing bytes are read and dropped, never awaited),
// and another collective. Every rank gets the report; none waits for the timeout.
void desync_between_hosts(int64_t n, bool other_op) {
  auto results = run_ranks(4, [n, other_op](int rank, int) {
    auto& comm = cohort::init().comm();
    comm.allreduce(torch::ones({2}));
    const auto start = std::chrono::steady_clock::now();
    try {
      auto t = torch::ones({rank >= 2 && !other_op ? n + 1 : n});
      if (rank >= 2 && other_op) comm.broadcast(t, 0);
      else comm.allreduce(t);
      ADD_FAILURE() << "expected a cohort::Error";
    } catch (const cohort::Error& e) {
      report(e.what());
      report(std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
  }, split_in_two());
  for (const auto& r : results) {
    ASSERT_EQ(r.reports.size(), 2u) << r.output;
    // Found by the headers, not by the abort that follows another rank's report (11 s when a rank
    // that moves no data in a broadcast stayed silent to its counterpart in an allreduce).
    EXPECT_LT(std::stod(r.reports[1]), 8.0);
    EXPECT_THAT(r.reports[0], HasSubstr("collective mismatch (desync) at collective #1"));
    EXPECT_THAT(r.reports[0], HasSubstr(other_op ? "rank 3: #1 broadcast"
                                                 : "rank 3: #1 allreduce(sum) float32 [" + std::to_string(n + 1) + "]"));
  }
}

TEST(Hier, AnotherSizeOnAnotherHostIsADesync) { desync_between_hosts(4, false); }
TEST(Hier, AnotherLargeSizeOnAnotherHostIsADesync) { desync_between_hosts(100000, false); }
TEST(Hier, AnotherCollectiveOnAnotherHostIsADesync) { desync_between_hosts(4, true); }

// Of 2 hosts x 2 ranks, rank 3 waits in its host's segment and rank 2 leads host 1 on the leaders'
// link; of 2 hosts x 1 rank (victim 1 of a world of 2), the link is all there is.
struct Victim {
  int rank, size;
};
class HierKill : public ::testing::TestWithParam<Victim> {};

TEST_P(HierKill, ARankKilledMidTransferIsNamed) {
  const int victim = GetParam().rank, size = GetParam().size;
  auto options = split_in_two();
  options.env.erase("COHORT_SHM_BYTES");
  options.expect_all_pass = false;
  auto results = run_ranks(size, [victim](int rank, int) {
    auto& comm = cohort::init().comm();
    ASSERT_NE(cohort::detail::comm_impl(comm).hier(), nullptr);
    auto big = torch::ones({1 << 20});
    comm.allreduce(big);
    if (rank == victim) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(::getpid(), SIGKILL);
      }).detach();
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 100000; ++i) comm.allreduce(big);
      ADD_FAILURE() << "expected a cohort::Error";
    } catch (const cohort::Error& e) {
      report(e.what());
      report(std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
  }, options);
  EXPECT_EQ(results[victim].signal, SIGKILL);
  for (int rank = 0; rank < size; ++rank) {
    if (rank == victim) continue;
    const auto& r = results[rank];
    EXPECT_TRUE(r.passed) << r.output;
    ASSERT_EQ(r.reports.size(), 2u) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("allreduce(sum) float32 [1048576]"));
    EXPECT_THAT(r.reports[0], HasSubstr("rank " + std::to_string(victim) + " died"));
    EXPECT_LT(std::stod(r.reports[1]), 20.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Victim, HierKill, ::testing::Values(Victim{3, 4}, Victim{2, 4}, Victim{1, 2}),
                         [](const auto& info) {
                           return "rank" + std::to_string(info.param.rank) + "of" + std::to_string(info.param.size);
                         });

}  // namespace comm_hier_test
