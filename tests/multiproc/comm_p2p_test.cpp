// Point to point on real rank processes: isend/irecv keep the order of one tag and keep tags apart
// (receives posted in another order than the sends), take any dtype and shape, do not deadlock when
// both sides send first or when collectives are queued in between; send_object/recv_object carry
// sizes the receiver does not know; and a mismatch, a timeout and a dead peer (also inside a group)
// fail promptly naming the peer. Run twice: through the shared-memory rings (ranks on one host) and
// through Gloo (COHORT_SHM=0, the path of ranks on several hosts).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_p2p_test {

using ::testing::HasSubstr;
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
    report(cohort::testing::kind_line(e));
  }
}

// The kind_line of the first error a rank reported.
std::string kind_of(const cohort::testing::RankResult& r) {
  for (const auto& line : r.reports)
    if (line.rfind("kind=", 0) == 0) return line;
  return "(no error reported)";
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

}  // namespace

TEST(PointToPoint, OrderWithinATagAndTagsApart) {
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    constexpr int kMessages = 30;
    if (rank == 0) {
      std::vector<cohort::Work> sends;
      for (int i = 0; i < kMessages; ++i) {
        sends.push_back(comm.isend(torch::full({16}, float(i)), 1, 0));
        sends.push_back(comm.isend(torch::full({2, 3}, int64_t(1000 + i)), 1, 7));
      }
      for (auto& s : sends) s.wait();
    } else {
      // All of tag 7 first, then tag 0: the tags are separate channels, each in send order.
      std::vector<torch::Tensor> seven, zero;
      std::vector<cohort::Work> recvs;
      for (int i = 0; i < kMessages; ++i) {
        seven.push_back(torch::empty({2, 3}, torch::kLong));
        recvs.push_back(comm.irecv(seven.back(), 0, 7));
      }
      for (int i = 0; i < kMessages; ++i) {
        zero.push_back(torch::empty({16}));
        recvs.push_back(comm.irecv(zero.back(), 0, 0));
      }
      for (int i = kMessages * 2 - 1; i >= 0; --i) recvs[i].wait();  // waited in reverse, too
      for (int i = 0; i < kMessages; ++i) {
        EXPECT_TRUE(seven[i].eq(1000 + i).all().item<bool>()) << i << ": " << seven[i];
        EXPECT_TRUE(zero[i].eq(i).all().item<bool>()) << i << ": " << zero[i];
      }
    }
  });
}

TEST(PointToPoint, AnyDtypeBothSidesSendFirstAndCollectivesInBetween) {
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    const int peer = 1 - rank;
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kInt, torch::kLong,
                       torch::kByte, torch::kBool}) {
      auto out = ((torch::arange(12) + rank) % 2).to(dtype).view({3, 4});
      auto in = torch::empty({3, 4}, torch::TensorOptions().dtype(dtype));
      auto send = comm.isend(out, peer);  // both send first: must not deadlock
      auto recv = comm.irecv(in, peer);
      send.wait();
      recv.wait();
      EXPECT_TRUE(torch::equal(in, ((torch::arange(12) + peer) % 2).to(dtype).view({3, 4}))) << dtype;
    }
    // Rank 0 sends before an allreduce, rank 1 receives after it: the receive does not block the queue.
    auto value = torch::full({5}, 3.f);
    if (rank == 0) {
      auto send = comm.isend(value, 1, 4);
      comm.allreduce(torch::ones({5}));
      send.wait();
    } else {
      comm.allreduce(torch::ones({5}));
      auto in = torch::empty({5});
      comm.recv(in, 0, 4);
      EXPECT_EQ(in[4].item<float>(), 3.f);
    }
    // A non-contiguous receive buffer gets the data through its view.
    auto base = torch::zeros({4, 2});
    if (rank == 0) comm.send(torch::arange(4, torch::kFloat), 1);
    else comm.recv(base.select(1, 1), 0);
    if (rank == 1) EXPECT_EQ(base.select(1, 1)[3].item<float>(), 3.f);
  });
}

TEST(PointToPoint, ObjectsCarrySizesTheReceiverDoesNotKnow) {
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    if (rank == 0) {
      comm.send_object(std::vector<int64_t>{8, 3, 224, 224}, 1, 2);
      comm.send_object(std::string("layer4.weight"), 1, 2);
      comm.send_object(std::vector<int64_t>{}, 1, 2);
    } else {
      EXPECT_EQ(comm.recv_object<std::vector<int64_t>>(0, 2), (std::vector<int64_t>{8, 3, 224, 224}));
      EXPECT_EQ(comm.recv_object<std::string>(0, 2), "layer4.weight");
      EXPECT_TRUE(comm.recv_object<std::vector<int64_t>>(0, 2).empty());
    }
  });
}

TEST(PointToPointFailures, ShapeMismatchIsNamedBeforeDataMoves) {
  auto results = run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    expect_error([&] {
      if (rank == 0) {
        comm.send(torch::ones({5}), 1);  // through shared memory complete at once (eager), on Gloo not
        comm.barrier();
      } else {
        comm.recv(torch::empty({4}), 0);
      }
    });
  }, short_timeout(60));
  ASSERT_FALSE(results[1].reports.empty()) << results[1].output;
  EXPECT_THAT(results[1].reports[0], HasSubstr("point-to-point mismatch at recv #0 (tag 0) from rank 0 float32 [4]: "
                                               "this rank receives into float32 [4] but rank 0 sent #0 float32 [5]"));
  ASSERT_FALSE(results[0].reports.empty()) << results[0].output;
  EXPECT_THAT(results[0].reports[0], HasSubstr("failed because rank 1 failed: [rank 1/2] point-to-point mismatch at recv #0"));
  EXPECT_EQ(kind_of(results[1]), "kind=desync ranks=0");
  EXPECT_EQ(kind_of(results[0]), "kind=aborted ranks=1");  // rank 1 failed first and told rank 0
  EXPECT_LT(seconds_of(results[0]), 5.0);
}

TEST(PointToPointFailures, TimeoutNamesThePeer) {
  auto results = run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::seconds(5));  // never sends
      return;
    }
    expect_error([&] { comm.recv(torch::empty({4}), 0, 3); });
  }, short_timeout(2));
  ASSERT_FALSE(results[1].reports.empty()) << results[1].output;
  EXPECT_THAT(results[1].reports[0], HasSubstr("recv #0 (tag 3) from rank 0 float32 [4] timed out after 2000 ms: "
                                               "rank 0 never sent it"));
  EXPECT_EQ(kind_of(results[1]), "kind=timeout ranks=0");
}

TEST(PointToPointFailures, DeadPeerInAGroupIsNamed) {
  auto results = run_ranks(4, [](int rank, int) {
    auto world = cohort::init();
    auto odd = world.new_group({1, 3}, cohort::GroupOptions().name("odd"));
    if (odd) {
      odd->barrier();
      if (rank == 3) ::kill(::getpid(), SIGKILL);
      expect_error([&] { odd->irecv(torch::empty({4}), 1).wait(); });
    }
    // Rank 0 hosts the store the group was made through: it stays until the others are done (the
    // barrier then fails on the killed rank, as it should).
    try {
      world.comm().barrier();
    } catch (const cohort::Error&) {
    }
  }, short_timeout(120, false));
  EXPECT_EQ(results[3].signal, SIGKILL);
  const auto& r = results[1];
  ASSERT_FALSE(r.reports.empty()) << r.output;
  EXPECT_THAT(r.reports[0], HasSubstr("recv #0 (tag 0) from rank 3 (group rank 1 of 'odd') float32 [4] in group "
                                      "'odd' failed: rank 3 (group rank 1 of 'odd') died"));
  EXPECT_EQ(kind_of(r), "kind=peer died ranks=3");  // world ranks, not the group's
  EXPECT_LT(seconds_of(r), 10.0);
}

}  // namespace comm_p2p_test
