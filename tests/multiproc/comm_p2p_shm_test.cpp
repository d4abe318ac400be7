// Point to point through the shared-memory rings (ranks on one host): the path is taken; messages
// larger than a ring stream through it in pieces, also back and forth with blocking calls, also when the receive is posted late and the message
// has to be set aside, and when receives are posted in another order than the sends; a mismatch is
// named whether the message arrived before or after its receive was posted; a send larger than the
// ring's room whose receive never comes times out naming the peer, and a receiver that dies while a
// large send streams is named. comm_p2p_test runs the shared tests on this path and (COHORT_SHM=0) on Gloo.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "comm/comm_access.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace comm_p2p_shm_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

template <typename Fn>
void expect_error(Fn fn) {
  try {
    fn();
    ADD_FAILURE() << "expected a cohort::Error";
  } catch (const cohort::Error& e) {
    report(e.what());
  }
}

cohort::testing::RanksOptions short_timeout(int seconds) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = std::to_string(seconds);
  options.deadline = std::chrono::seconds(60);
  options.expect_all_pass = false;
  return options;
}

// A tensor that says which message it is: distinct in every element, so a misplaced piece shows.
torch::Tensor message(int64_t elements, int index) {
  return torch::arange(elements, torch::kFloat).mul_(0.5).add_(float(index) * 1e6f);
}

}  // namespace

TEST(ShmPointToPoint, LargeMessagesStreamThroughTheRingInAnyReceiveOrder) {
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    auto* mailbox = cohort::detail::comm_impl(comm).mailbox();
    ASSERT_NE(mailbox, nullptr) << "ranks on one host must have the shared-memory rings";
    const int64_t ring_floats = int64_t(cohort::detail::comm_impl(comm).shm()->ring_capacity() / 4);
    // Smaller than the ring, about its size, and several rings long; each on its own tag.
    const std::vector<int64_t> sizes{1, 1000, ring_floats - 16, 3 * ring_floats + 7, 9 * ring_floats};
    const int peer = 1 - rank;
    const auto sent_before = mailbox->sent();
    const auto received_before = mailbox->received();
    std::vector<cohort::Work> sends;
    for (size_t i = 0; i < sizes.size(); ++i) sends.push_back(comm.isend(message(sizes[i], int(i)), peer, int(i)));
    // Receives in reverse order: the earlier messages must be set aside to reach the last one.
    std::vector<torch::Tensor> in(sizes.size());
    for (size_t k = sizes.size(); k-- > 0;) {
      in[k] = torch::empty({sizes[k]});
      comm.recv(in[k], peer, int(k));
    }
    for (auto& s : sends) s.wait();
    for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(torch::equal(in[i], message(sizes[i], int(i)))) << i;
    EXPECT_EQ(mailbox->sent() - sent_before, int64_t(sizes.size()));
    EXPECT_EQ(mailbox->received() - received_before, int64_t(sizes.size()));
    // A receive posted long before its message, and a large one posted long after.
    auto early = torch::empty({5 * ring_floats});
    if (rank == 1) {
      auto work = comm.irecv(early, 0, 9);
      comm.barrier();
      work.wait();
      EXPECT_TRUE(torch::equal(early, message(5 * ring_floats, 9)));
    } else {
      comm.barrier();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm.send(message(5 * ring_floats, 9), 1, 9);
    }
  });
}

// Blocking calls, each side streaming a message of a few rings back and forth: a reader that waited for
// bytes beyond those published (not those it took) stalled with the writer waiting for room.
TEST(ShmPointToPoint, BlockingRoundTripsOfMessagesLargerThanTheRingNeverStall) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = "20";  // a stall fails as a timeout, not as the test's deadline
  run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    const int64_t floats = int64_t(cohort::detail::comm_impl(comm).shm()->ring_capacity() / 4) * 2 + 123;
    auto data = message(floats, 0);
    for (int trip = 0; trip < 1000; ++trip) {
      if (rank == 0) {
        comm.send(data, 1);
        comm.recv(data, 1);
      } else {
        comm.recv(data, 0);
        comm.send(data, 0);
      }
    }
    EXPECT_TRUE(torch::equal(data, message(floats, 0)));
  }, options);
}

TEST(ShmPointToPoint, MismatchIsNamedWhetherTheMessageCameBeforeOrAfterItsReceive) {
  for (const bool receive_first : {false, true}) {
    auto results = run_ranks(2, [receive_first](int rank, int) {
      auto& comm = cohort::init().comm();
      expect_error([&] {
        if (rank == 0) {
          if (receive_first) comm.barrier();
          comm.send(torch::ones({3, 5}, torch::kDouble), 1, 2);  // eager: complete at once
          if (!receive_first) comm.barrier();
          comm.barrier();  // learns of rank 1's failure here
        } else {
          auto into = torch::empty({3, 4}, torch::kDouble);
          if (receive_first) {
            auto work = comm.irecv(into, 0, 2);
            comm.barrier();
            work.wait();
          } else {
            comm.barrier();
            comm.recv(into, 0, 2);
          }
        }
      });
    }, short_timeout(30));
    ASSERT_FALSE(results[1].reports.empty()) << results[1].output;
    EXPECT_THAT(results[1].reports[0],
                HasSubstr("point-to-point mismatch at recv #0 (tag 2) from rank 0 float64 [3, 4]: this rank receives "
                          "into float64 [3, 4] but rank 0 sent #0 float64 [3, 5]"))
        << "receive first: " << receive_first;
    ASSERT_FALSE(results[0].reports.empty()) << results[0].output;
    EXPECT_THAT(results[0].reports[0], HasSubstr("failed because rank 1 failed: [rank 1/2] point-to-point mismatch at recv #0 (tag 2)"));
  }
}

TEST(ShmPointToPointFailures, ASendLargerThanTheRingWithNoReceiveTimesOut) {
  auto results = run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    const int64_t floats = int64_t(cohort::detail::comm_impl(comm).shm()->ring_capacity());  // four rings' worth
    if (rank == 0) expect_error([&] { comm.send(torch::zeros({floats}), 1, 5); });
    else std::this_thread::sleep_for(std::chrono::seconds(4));  // never receives
  }, short_timeout(2));
  ASSERT_FALSE(results[0].reports.empty()) << results[0].output;
  EXPECT_THAT(results[0].reports[0], HasSubstr("send #0 (tag 5) to rank 1 float32 ["));
  EXPECT_THAT(results[0].reports[0], HasSubstr("timed out after 2000 ms: rank 1 did not receive it"));
}

TEST(ShmPointToPointFailures, AReceiverThatDiesWhileALargeSendStreamsIsNamed) {
  auto results = run_ranks(2, [](int rank, int) {
    auto& comm = cohort::init().comm();
    const int64_t floats = 4 * int64_t(cohort::detail::comm_impl(comm).shm()->ring_capacity());
    if (rank == 1) {
      comm.barrier();
      ::kill(::getpid(), SIGKILL);
    }
    comm.barrier();
    expect_error([&] { comm.send(torch::zeros({floats}), 1); });
  }, short_timeout(60));
  EXPECT_EQ(results[1].signal, SIGKILL);
  ASSERT_FALSE(results[0].reports.empty()) << results[0].output;
  EXPECT_THAT(results[0].reports[0], HasSubstr("to rank 1 float32 ["));
  EXPECT_THAT(results[0].reports[0], HasSubstr("failed: rank 1 died"));
}

}  // namespace comm_p2p_shm_test
