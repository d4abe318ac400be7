// The socket module's descriptors and waits (see socket.h): Fd, poll(2) with deadlines and signals
// handled, and stream reads and writes that move every byte or say why not. Reads and writes try the
// call first and poll only when it would block, so a frame that fits costs one system call.
#include "core/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>

namespace cohort::detail::net {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset(int fd) {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

int ms_until(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, std::numeric_limits<int>::max()));
}

int poll_fds(pollfd* fds, size_t count, int timeout_ms) {
  const auto deadline = timeout_ms < 0 ? Clock::time_point::max()
                                       : Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int wait = timeout_ms;; wait = ms_until(deadline)) {
    const int ready = ::poll(fds, nfds_t(count), wait);
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd waiting{fd, events, 0};
  return poll_fds(&waiting, 1, ms_until(deadline)) > 0;
}

IoResult read_exact(int fd, void* out, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(out);
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::recv(fd, p + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n == 0) return {IoResult::kClosed, "the peer closed the connection"};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return {IoResult::kFailed, std::string("the connection failed: ") + std::strerror(errno)};
    if (!wait_for(fd, POLLIN, deadline)) return {IoResult::kTimedOut, "no answer before the deadline"};
  }
  return {};
}

IoResult write_all(int fd, const void* data, size_t size, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::send(fd, p + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      return {IoResult::kFailed, std::string("the connection failed: ") + std::strerror(n == 0 ? EPIPE : errno)};
    if (!wait_for(fd, POLLOUT, deadline)) return {IoResult::kTimedOut, "no progress sending before the deadline"};
  }
  return {};
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

// A line of /proc/sys/net/ipv4 (the algorithms the kernel has, those any process may choose), or "?".
std::string kernel_list(const char* name) {
  std::ifstream file(std::string("/proc/sys/net/ipv4/") + name);
  std::string line;
  return std::getline(file, line) && !line.empty() ? line : "?";
}

}  // namespace

std::string set_congestion_control(int fd, const std::string& name) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), socklen_t(name.size())) == 0) return "";
  const int error = errno;
  return "the kernel refuses TCP congestion control '" + name + "' (" + std::strerror(error) +
         "; available: " + kernel_list("tcp_available_congestion_control") +
         "; allowed without CAP_NET_ADMIN: " + kernel_list("tcp_allowed_congestion_control") + ")";
}

std::string congestion_control_refused(const std::string& name) {
  Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe) probe.reset(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe) return std::string("no TCP socket to try it on: ") + std::strerror(errno);
  return set_congestion_control(probe.get(), name);
}

}  // namespace cohort::detail::net
