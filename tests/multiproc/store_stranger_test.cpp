// A two-rank job under strangers (issue 28 item 2): while the job runs, a process on 127.0.0.1 that
// reached rank 0's store tries to read a key, forge one, send a 3 GB header and a partial message,
// and holds a half-sent message open as rank 0 exits. Each is refused with a line naming its address;
// the job's collectives stay right and rank 0 exits at once. No socket of either rank listens on a
// wildcard address (/proc/net/tcp{,6}, what `ss -ltnp` shows).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cohort/comm.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "core/socket.h"
#include "world/store_wire.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace store_stranger_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;
using namespace std::chrono_literals;
namespace wire = cohort::detail::store_wire;

namespace {

// The socket inodes this process holds (/proc/self/fd -> "socket:[INODE]").
std::set<std::string> my_socket_inodes() {
  std::set<std::string> inodes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// "ADDRESS-HEX:PORT-HEX" of every listening TCP socket of this process, as /proc/net/tcp{,6} lists them.
std::vector<std::string> my_listeners() {
  const auto mine = my_socket_inodes();
  std::vector<std::string> listeners;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state == "0A" && mine.count(inode)) listeners.push_back(local);  // 0A: LISTEN
    }
  }
  return listeners;
}

bool is_wildcard(const std::string& local) {
  const std::string address = local.substr(0, local.find(':'));
  return address.find_first_not_of('0') == std::string::npos;
}

// A connection from a stranger: whatever it sends, then everything until the store hangs up.
std::string stranger_sends(int port, const std::string& bytes) {
  namespace net = cohort::detail::net;
  const int fd = net::try_connect({"127.0.0.1", port}, net::Clock::now() + std::chrono::seconds(2)).release();
  if (fd < 0) return "no connection";
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  timeval wait{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  std::string got;
  char chunk[4096];
  ssize_t n;
  while ((n = ::recv(fd, chunk, sizeof chunk, 0)) > 0) got.append(chunk, size_t(n));
  ::close(fd);
  return got;
}

float allreduced(cohort::Comm& comm, int rank) {
  auto t = torch::full({4}, float(rank + 1));
  comm.allreduce(t);
  return t[0].item<float>();
}

}  // namespace

TEST(StoreStranger, EveryAttemptIsRefusedAndTheJobIsUnharmed) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_JOB_SECRET"] = "0123456789abcdef0123456789abcdef";
  options.deadline = 90s;  // c10d's TCPStore hung rank 0's exit for as long as a stranger held on
  auto results = run_ranks(2, [](int rank, int) {
    const auto world = cohort::init();
    auto& comm = world.comm();
    for (const auto& local : my_listeners()) {
      EXPECT_FALSE(is_wildcard(local)) << "rank " << rank << " listens on every interface: " << local;
      report("listener " + local);
    }
    EXPECT_EQ(allreduced(comm, rank), 3.0f);
    if (rank == 0) {
      const int port = world.master_port();
      // Reading a key, forging a value, a 3 GB SET header: each before any proof of the secret.
      const std::string read = stranger_sends(port, wire::encode({wire::kGet, {"cohort/job", wire::pack_i64(1000)}}));
      EXPECT_EQ(read.find("run:"), std::string::npos) << "a stranger read the job key";
      stranger_sends(port, wire::encode({wire::kAuth, {std::string(32, 'x'), std::string(32, 'y')}}) +
                               wire::encode({wire::kSet, {"cohort/arrived/1", "forged"}}));
      stranger_sends(port, std::string("\x00\x00\x00\xC0\x0A\x01\x00\x00\x00", 9));
    }
    comm.barrier();
    EXPECT_EQ(allreduced(comm, rank), 3.0f);
    if (rank == 0) {  // a half-sent message, held open while rank 0 exits
      namespace net = cohort::detail::net;
      const net::Endpoint store{"127.0.0.1", world.master_port()};
      const int fd = net::try_connect(store, net::Clock::now() + std::chrono::seconds(2)).release();  // held open
      (void)!::send(fd, "\x10\x00", 2, MSG_NOSIGNAL);
      report("holding a partial message as rank 0 exits");
    }
  }, options);
  ASSERT_TRUE(results[0].passed) << cohort::testing::describe(results);
  const std::string& out = results[0].output;
  EXPECT_THAT(out, HasSubstr(": its first message is not a proof of the job's secret"));
  EXPECT_THAT(out, HasSubstr(": it does not know the job's secret (wrong HMAC proof)"));
  EXPECT_THAT(out, HasSubstr(": a message of 3221225472 bytes is over the limit of 1024 bytes before the job's "
                             "secret is proved"));
  EXPECT_THAT(out, HasSubstr("rendezvous store at 127.0.0.1:"));
  EXPECT_THAT(out, HasSubstr(": refused 127.0.0.1:"));
}

}  // namespace store_stranger_test
