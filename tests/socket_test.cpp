// The socket module (src/core/socket.h) on 127.0.0.1: a closed port is refused with errno's reason, a
// connection that gets no answer ends at its deadline, a peer that closes mid-message is told apart
// from silence, a name that does not resolve is named, the free-port probes agree with the kernel, and
// a TCP congestion control is set by name or refused with the kernel's reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include "core/socket.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace socket_test {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace cohort::detail;
using namespace std::chrono_literals;

namespace {

net::Clock::time_point in(std::chrono::milliseconds ms) { return net::Clock::now() + ms; }

net::Fd listener() {
  std::string error;
  net::Fd fd = net::listen_on("127.0.0.1", 0, error);
  EXPECT_TRUE(fd) << error;
  return fd;
}

// The connection a listener holds (it is non-blocking: wait for it first).
net::Fd accepted(const net::Fd& listening) {
  EXPECT_TRUE(net::wait_for(listening.get(), POLLIN, in(5000ms)));
  return net::accept_one(listening.get());
}

}  // namespace

TEST(Socket, FdClosesWhatItHolds) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  const int raw = ends[0];
  {
    net::Fd read_end(ends[0]);
    net::Fd moved = std::move(read_end);
    EXPECT_FALSE(read_end);
    EXPECT_EQ(moved.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1) << "the moved-to Fd closed the descriptor";
  net::Fd write_end(ends[1]);
  EXPECT_EQ(::close(write_end.release()), 0) << "release() gives the descriptor up unclosed";
}

TEST(Socket, ConnectingToAClosedPortSaysRefused) {
  int port = 0;
  {
    const net::Fd closing = listener();
    port = net::port_of(closing.get());
  }
  const net::Endpoint to{"127.0.0.1", port};
  EXPECT_EQ(to.text(), "127.0.0.1:" + std::to_string(port));
  std::string why;
  EXPECT_FALSE(net::try_connect(to, in(2000ms), &why));
  EXPECT_EQ(why, "Connection refused");
  why.clear();
  EXPECT_FALSE(net::connect_until(to, in(200ms), &why)) << "tried again until its deadline";
  EXPECT_EQ(why, "Connection refused");
  EXPECT_FALSE(net::can_connect(to, 1000ms));
  const net::Endpoint v6{"::1", 7};
  EXPECT_EQ(v6.text(), "[::1]:7");
}

// A listener whose queue is full drops the handshake (Linux), so connect waits for an answer that
// never comes: the attempt ends at its deadline, saying so.
TEST(Socket, ConnectEndsAtItsDeadline) {
  net::Fd full(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(full.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(full.get(), 0), 0);
  const net::Endpoint to{"127.0.0.1", net::port_of(full.get())};
  std::vector<net::Fd> queued;
  std::string why;
  const auto start = net::Clock::now();
  for (int i = 0; i < 8 && why.empty(); ++i) {
    net::Fd fd = net::try_connect(to, in(300ms), &why);
    if (fd) queued.push_back(std::move(fd));
  }
  EXPECT_THAT(why, StartsWith("no answer within "));
  EXPECT_LT(net::Clock::now() - start, 30s) << "each attempt ends at its 300 ms deadline";
}

TEST(Socket, ReadExactTellsAPeerThatClosedFromASilentOne) {
  const net::Fd listening = listener();
  const net::Endpoint to{"127.0.0.1", net::port_of(listening.get())};
  net::Fd client = net::try_connect(to, in(5000ms));
  ASSERT_TRUE(client);
  net::Fd server = accepted(listening);
  ASSERT_TRUE(server);
  EXPECT_EQ(net::peer_of(server.get()), "127.0.0.1:" + std::to_string(net::port_of(client.get())));

  char got[8] = {0};
  const net::IoResult silent = net::read_exact(client.get(), got, sizeof got, in(100ms));
  EXPECT_EQ(silent.status, net::IoResult::kTimedOut);
  EXPECT_EQ(silent.why, "no answer before the deadline");

  ASSERT_TRUE(net::write_all(server.get(), std::string("whole"), in(5000ms)).ok());
  ASSERT_TRUE(net::read_exact(client.get(), got, 5, in(5000ms)).ok());
  EXPECT_EQ(std::string(got, 5), "whole");

  ASSERT_TRUE(net::write_all(server.get(), std::string("hal"), in(5000ms)).ok());
  server.reset();  // three bytes of an eight-byte message, then gone
  const net::IoResult closed = net::read_exact(client.get(), got, sizeof got, in(5000ms));
  EXPECT_EQ(closed.status, net::IoResult::kClosed);
  EXPECT_EQ(closed.why, "the peer closed the connection");
}

TEST(Socket, AHostThatDoesNotResolveIsNamed) {
  std::string error;
  EXPECT_TRUE(net::addresses_of("no.such.host.invalid", error).empty());
  EXPECT_THAT(error, StartsWith("cannot resolve host no.such.host.invalid ("));
  EXPECT_NE(net::resolve_error("no.such.host.invalid"), "");
  std::string why;
  const auto start = net::Clock::now();
  const net::Endpoint unknown{"no.such.host.invalid", 80};
  EXPECT_FALSE(net::connect_until(unknown, in(10000ms), &why));
  EXPECT_THAT(why, StartsWith("cannot resolve host no.such.host.invalid ("));
  EXPECT_LT(net::Clock::now() - start, 9s) << "a name that does not resolve is not tried again";
  EXPECT_EQ(net::addresses_of("127.0.0.1", error), std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(net::resolve_error("127.0.0.1"), "");
  EXPECT_TRUE(net::is_local_host("127.0.0.1"));
  const net::Endpoint local{"127.0.0.1", 9};
  EXPECT_EQ(net::local_address_towards(local), std::optional<std::string>("127.0.0.1"));
}

TEST(Socket, FreePortProbesAgreeWithTheKernel) {
  const int port = net::pick_free_port();
  ASSERT_GT(port, 0);
  EXPECT_FALSE(net::port_in_use(port));
  std::string error;
  const net::Fd held = net::listen_on("127.0.0.1", port, error);
  ASSERT_TRUE(held) << error;
  EXPECT_TRUE(net::port_in_use(port));
  EXPECT_FALSE(net::listen_on("127.0.0.1", port, error));
  EXPECT_EQ(error, "Address already in use");
  EXPECT_FALSE(net::listen_on("rank-zero", 0, error));
  EXPECT_EQ(error, "not a numeric address");
}

TEST(Socket, PollWaitsOnAnyDescriptor) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  const net::Fd read_end(ends[0]), write_end(ends[1]);
  std::vector<pollfd> fds{{read_end.get(), POLLIN, 0}};
  EXPECT_EQ(net::poll_fds(fds, 0), 0);
  ASSERT_EQ(::write(write_end.get(), "x", 1), 1);
  EXPECT_EQ(net::poll_fds(fds, 5000), 1);
  EXPECT_TRUE(fds[0].revents & POLLIN);
}

TEST(Socket, CongestionControlIsSetByNameOrRefusedWithTheKernelsReason) {
  // Reno is always built in and allowed to every process.
  EXPECT_EQ(net::congestion_control_refused("reno"), "");
  net::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(fd);
  ASSERT_EQ(net::set_congestion_control(fd.get(), "reno"), "");
  char name[16] = {};
  socklen_t length = sizeof name;
  ASSERT_EQ(::getsockopt(fd.get(), IPPROTO_TCP, TCP_CONGESTION, name, &length), 0);
  EXPECT_STREQ(name, "reno");
  EXPECT_THAT(net::congestion_control_refused("no-such-cc"),
              StartsWith("the kernel refuses TCP congestion control 'no-such-cc' (No such file or directory; "
                         "available: "));
}

}  // namespace socket_test
