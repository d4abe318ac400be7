// The shared-memory transport (src/comm/shm_transport.*) on 2 and 3 local rank processes: it is chosen
// when every rank is on this host and can be turned off; with tiny chunks (COHORT_SHM_BYTES=4096) every
// collective crosses many chunk boundaries and uneven slices, and each result must equal, bit for bit,
// the reduction of every rank's tensor taken in rank order. A rank that stops or dies inside a transfer
// must make the others fail promptly, naming it; a segment left by a dead job is removed at the next
// start, a live one never.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "comm/comm_access.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_shm_test {

using ::testing::HasSubstr;
using cohort::ReduceOp;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

// Rank r's input: distinct per rank and element, not exactly representable sums (so order matters).
torch::Tensor input_of(int rank, int64_t n, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + rank);
  if (torch::isFloatingType(dtype)) return torch::randn({n}, gen, torch::TensorOptions().dtype(dtype));
  return torch::randint(1, 5, {n}, gen, torch::TensorOptions().dtype(dtype));
}

// The reduction of every rank's input in rank order, as the transport computes it.
torch::Tensor expected_reduction(int size, int64_t n, torch::ScalarType dtype, ReduceOp op) {
  torch::Tensor acc = input_of(0, n, dtype);
  for (int r = 1; r < size; ++r) {
    auto next = input_of(r, n, dtype);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc = acc + next; break;
      case ReduceOp::kProduct: acc = acc * next; break;
      case ReduceOp::kMin: acc = torch::minimum(acc, next); break;
      case ReduceOp::kMax: acc = torch::maximum(acc, next); break;
    }
  }
  if (op == ReduceOp::kAvg) acc.div_(size);
  return acc;
}

cohort::detail::ShmTransport* shm_of(cohort::Comm& comm) { return cohort::detail::comm_impl(comm).shm(); }

cohort::testing::RanksOptions tiny_chunks() {
  cohort::testing::RanksOptions options;
  options.env["COHORT_SHM_BYTES"] = "4096";  // 1024 float32 per rank per chunk
  return options;
}

void every_collective_across_chunks(int rank, int size) {
  auto& comm = cohort::init().comm();
  auto* shm = shm_of(comm);
  ASSERT_NE(shm, nullptr) << "all ranks are on this host: the shared-memory transport must be chosen";
  EXPECT_EQ(shm->slot_bytes(), 4096u);
  const int64_t before = shm->ops_done();
  int64_t expected_ops = 0;
  // Sizes around the chunk (1024 float32) and smaller than the world, for every op.
  for (int64_t n : {1, 2, 1023, 1024, 1025, 3000, 10007}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      auto t = input_of(rank, n, torch::kFloat);
      comm.allreduce(t, op);
      ++expected_ops;
      EXPECT_TRUE(torch::equal(t, expected_reduction(size, n, torch::kFloat, op)))
          << "allreduce(" << cohort::reduce_op_name(op) << ") of " << n << " float32 differs";
    }
  }
  for (auto dtype : {torch::kDouble, torch::kLong, torch::kByte}) {
    auto t = input_of(rank, 2500, dtype);
    comm.allreduce(t, ReduceOp::kSum);
    ++expected_ops;
    EXPECT_TRUE(torch::equal(t, expected_reduction(size, 2500, dtype, ReduceOp::kSum))) << dtype;
  }
  // reduce_scatter: blocks of 700 and 3001 elements (several chunks of 1024 / size).
  for (int64_t block : {1, 700, 3001}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      auto out = comm.reduce_scatter(input_of(rank, block * size, torch::kFloat), op);
      ++expected_ops;
      auto full = expected_reduction(size, block * size, torch::kFloat, op);
      EXPECT_TRUE(torch::equal(out, full.narrow(0, rank * block, block)))
          << "reduce_scatter(" << cohort::reduce_op_name(op) << ") block " << block;
    }
  }
  // An output of another layout or dtype takes the same path as everyone else's (through a copy).
  auto strided_out = torch::zeros({3, 2}, torch::kDouble).t();
  ASSERT_FALSE(strided_out.is_contiguous());
  comm.reduce_scatter_async(strided_out, input_of(rank, 6 * size, torch::kFloat), ReduceOp::kSum).wait();
  ++expected_ops;
  auto full = expected_reduction(size, 6 * size, torch::kFloat, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(strided_out, full.narrow(0, rank * 6, 6).view({2, 3}).to(torch::kDouble)));
  // allgather and broadcast move bytes of any dtype, including those Gloo cannot reduce.
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kBool}) {
    auto mine = input_of(rank, 1500, torch::kFloat).gt(0).to(dtype);
    auto gathered = comm.allgather(mine);
    ++expected_ops;
    for (int r = 0; r < size; ++r)
      EXPECT_TRUE(torch::equal(gathered[r], input_of(r, 1500, torch::kFloat).gt(0).to(dtype))) << dtype;
    auto b = input_of(rank, 2049, torch::kFloat).to(dtype);
    comm.broadcast(b, size - 1);
    ++expected_ops;
    EXPECT_TRUE(torch::equal(b, input_of(size - 1, 2049, torch::kFloat).to(dtype))) << dtype;
  }
  EXPECT_EQ(shm->ops_done() - before, expected_ops) << "a collective took another path";
  // Half has no CPU reduction kernels here: it goes through Gloo and still agrees.
  auto half = torch::full({5}, rank + 1, torch::kHalf);
  comm.allreduce(half);
  EXPECT_EQ(shm->ops_done() - before, expected_ops);
  EXPECT_EQ(half[4].item<float>(), float(size * (size + 1) / 2));
}

}  // namespace

class Shm : public ::testing::TestWithParam<int> {};

TEST_P(Shm, EveryCollectiveAcrossChunksIsBitwiseTheRankOrderReduction) {
  run_ranks(GetParam(), every_collective_across_chunks, tiny_chunks());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Shm, ::testing::Values(2, 3));

TEST(Shm, OffWithCohortShm0OnAnyRankAndGlooGivesTheSameSums) {
  run_ranks(3, [](int rank, int size) {
    if (rank == 2) setenv("COHORT_SHM", "0", 1);  // one rank says no: nobody uses it
    auto& comm = cohort::init().comm();
    EXPECT_EQ(shm_of(comm), nullptr);
    auto t = torch::full({3000}, float(rank + 1));
    comm.allreduce(t);
    EXPECT_TRUE(t.eq(6.f).all().item<bool>());
    auto out = comm.reduce_scatter(torch::arange(3 * 1000, torch::kFloat));
    EXPECT_EQ(out[0].item<float>(), float(3 * rank * 1000));
  });
}

TEST(Shm, BadSettingsAreRejected) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  const std::vector<std::array<const char*, 3>> cases = {
      {"COHORT_SHM", "yes", "COHORT_SHM=yes is not a switch (0: Gloo only, 1: shared memory, the default) from 0 to 1"},
      {"COHORT_SHM", "2", "COHORT_SHM=2 is not a switch (0: Gloo only, 1: shared memory, the default) from 0 to 1"},
      {"COHORT_SHM_BYTES", "lots", "COHORT_SHM_BYTES=lots is not a number of bytes from 1 to 1073741824"}};
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

// On one host every collective agrees through the segment, whatever path its data takes: a rank in a
// shared-memory allreduce and a rank in a Gloo all-to-all must both be told of the desync at once (with
// the agreement over sockets for Gloo's ops they would wait for each other until the timeout).
TEST(Shm, ASharedMemoryCollectiveAgainstAGlooOneIsADesyncNamedAtOnce) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = "60";
  auto results = run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    ASSERT_NE(shm_of(comm), nullptr);
    const auto start = std::chrono::steady_clock::now();
    try {
      auto t = torch::ones({4});
      if (rank == 0) comm.allreduce(t);
      else comm.alltoall_single(torch::empty({4}), t);
      ADD_FAILURE() << "expected a cohort::Error";
    } catch (const cohort::Error& e) {
      report(e.what());
      report(std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
  }, options);
  for (const auto& r : results) {
    ASSERT_GE(r.reports.size(), 2u) << r.output;
    EXPECT_THAT(r.reports[0], HasSubstr("collective mismatch (desync) at collective #0"));
    EXPECT_THAT(r.reports[0], HasSubstr("rank 0: #0 allreduce(sum) float32 [4]"));
    EXPECT_THAT(r.reports[0], HasSubstr("rank 1: #0 alltoall float32 [4]"));
    EXPECT_LT(std::stod(r.reports[1]), 5.0);
  }
}

// Collectives of both paths interleaved, blocking ones on the caller's thread and async ones on the
// launcher thread: each agrees in its turn and every result is right.
TEST(Shm, BothPathsAndBothThreadsInterleaveInIssueOrder) {
  run_ranks(3, [](int rank, int size) {
    auto& comm = cohort::init().comm();
    ASSERT_NE(shm_of(comm), nullptr);
    for (int i = 0; i < 20; ++i) {
      auto async_sum = torch::full({100 + i}, float(rank + 1));
      auto pending = comm.allreduce_async(async_sum);                          // shm, launcher thread
      auto gathered = torch::empty({3});
      comm.alltoall_single(gathered, torch::full({3}, float(rank)));           // Gloo
      auto blocking_sum = comm.allreduce(torch::full({7}, float(i + rank)));  // shm, this thread
      comm.barrier();
      pending.wait();
      EXPECT_TRUE(async_sum.eq(6.f).all().item<bool>());
      EXPECT_TRUE(gathered.equal(torch::tensor({0.f, 1.f, 2.f})));
      EXPECT_TRUE(blocking_sum.eq(float(3 * i + 3)).all().item<bool>());
    }
  });
}

// The transport reads a rank's own block of a reduce-scatter straight from its input: an output that
// is that very block (a view into the input) must still get the reduction, not a half-written mix.
TEST(Shm, ReduceScatterIntoAViewOfTheInputsOwnBlock) {
  run_ranks(3, [](int rank, int size) {
    auto& comm = cohort::init().comm();
    ASSERT_NE(shm_of(comm), nullptr);
    const int64_t block = 5000;
    auto input = input_of(rank, size * block, torch::kFloat);
    auto own_block = input.narrow(0, rank * block, block);
    comm.reduce_scatter_async(own_block, input, ReduceOp::kSum).wait();
    EXPECT_TRUE(torch::equal(own_block, expected_reduction(size, size * block, torch::kFloat, ReduceOp::kSum)
                                            .narrow(0, rank * block, block)));
  }, tiny_chunks());
}

// A rank that stops (SIGSTOP: alive, sockets open) while the others wait in a shared-memory barrier:
// they must give up at the collective's timeout and name it, not spin forever.
TEST(Shm, AStoppedRankTimesOutNamingIt) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = "3";
  options.deadline = std::chrono::seconds(40);
  options.expect_all_pass = false;
  auto results = run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    ASSERT_NE(shm_of(comm), nullptr);
    auto big = torch::ones({4 << 20});
    comm.allreduce(big);
    const auto pids = comm.allgather(torch::tensor({int64_t(::getpid())}));
    if (rank == 1) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(::getpid(), SIGSTOP);
      }).detach();
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 100000; ++i) comm.allreduce(big);
      ADD_FAILURE() << "expected a cohort::Error";
    } catch (const cohort::Error& e) {
      report(e.what());
      report("seconds=" + std::to_string(
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
    if (rank == 0) ::kill(pid_t(pids[1].item<int64_t>()), SIGKILL);  // no need to wait for the deadline
  }, options);
  const auto& r = results[0];
  EXPECT_TRUE(r.passed) << r.output;
  ASSERT_GE(r.reports.size(), 2u) << r.output;
  EXPECT_THAT(r.reports[0], HasSubstr("allreduce(sum) float32 [4194304] timed out after 3000 ms"));
  EXPECT_THAT(r.reports[0], HasSubstr("rank 1 never arrived"));
  EXPECT_LT(std::stod(r.reports[1].substr(8)), 10.0);
}

namespace {

// A pid that was a process a moment ago and is none now (a child, reaped).
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

bool segment_exists(const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; }

void make_segment(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name;
  ::close(fd);
}

}  // namespace

// A rank 0 killed -9 during set-up left its segment's name in /dev/shm, where such names piled up.
// The next job's rank 0 removes it: cohort's name, the pid in it gone, the owner's lock free. A name
// whose lock is held (a live job whose pid this namespace does not see) and one of a live pid stay.
TEST(Shm, SegmentsOfDeadJobsAreRemovedAtTheNextStartAndLiveOnesKept) {
  const std::string stale = "/cohort-" + std::to_string(dead_pid()) + "-00000000deadbeef";
  const std::string locked = "/cohort-" + std::to_string(dead_pid()) + "-00000000feedbeef";
  const std::string live = "/cohort-" + std::to_string(::getpid()) + "-00000000cafebeef";
  int lock_fd = -1;
  if (!cohort::testing::is_rank_process()) {
    for (const auto& name : {stale, locked, live}) make_segment(name);
    lock_fd = ::shm_open(locked.c_str(), O_RDWR, 0600);
    ASSERT_EQ(::flock(lock_fd, LOCK_EX | LOCK_NB), 0);
  }
  run_ranks(2, [](int, int) {
    auto world = cohort::init();
    auto x = torch::ones({4});
    world.comm().allreduce(x, ReduceOp::kSum);
    EXPECT_EQ(x[0].item<float>(), 2.0f);
  });
  EXPECT_FALSE(segment_exists(stale)) << stale;
  EXPECT_TRUE(segment_exists(locked)) << locked;
  EXPECT_TRUE(segment_exists(live)) << live;
  ::close(lock_fd);
  for (const auto& name : {stale, locked, live}) ::shm_unlink(name.c_str());
}

}  // namespace comm_shm_test
