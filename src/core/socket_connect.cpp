// The socket module's outgoing connections (see socket.h): every address a name resolves to, each
// attempt non-blocking and bounded by the caller's deadline, the socket handed back blocking; and the
// retry while nothing listens yet, which rendezvous and the control plane need when ranks start apart.
#include "core/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace cohort::detail::net {
namespace {

constexpr std::chrono::milliseconds kRetryPause{20};

// Connects `fd` (non-blocking) to `address` before `deadline`; "" or why not.
std::string connect_one(int fd, const addrinfo& address, Clock::time_point deadline) {
  if (::connect(fd, address.ai_addr, address.ai_addrlen) == 0) return "";
  if (errno != EINPROGRESS) return std::strerror(errno);
  const auto start = Clock::now();
  if (!wait_for(fd, POLLOUT, deadline)) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return "no answer within " + std::to_string(waited) + " ms";
  }
  int error = 0;
  socklen_t size = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
  return error == 0 ? "" : std::strerror(error);
}

}  // namespace

std::string Endpoint::text() const {
  const bool v6_literal = host.find(':') != std::string::npos;
  return (v6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Fd try_connect(const Endpoint& to, Clock::time_point deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  const int rc = ::getaddrinfo(to.host.c_str(), std::to_string(to.port).c_str(), &hints, &resolved);
  if (rc != 0) {
    if (why != nullptr) *why = "cannot resolve host " + to.host + " (" + ::gai_strerror(rc) + ")";
    return Fd();
  }
  Fd connected;
  std::string reason = "no address to connect to";
  for (addrinfo* a = resolved; a != nullptr && !connected; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      reason = std::strerror(errno);
      continue;
    }
    reason = connect_one(fd.get(), *a, deadline);
    if (!reason.empty()) continue;
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    connected = std::move(fd);
  }
  ::freeaddrinfo(resolved);
  if (!connected && why != nullptr) *why = reason;
  return connected;
}

Fd connect_until(const Endpoint& to, Clock::time_point deadline, std::string* why) {
  std::string reason;
  for (;;) {
    Fd fd = try_connect(to, deadline, &reason);
    const bool unresolved = reason.rfind("cannot resolve host", 0) == 0;
    if (fd || unresolved || Clock::now() + kRetryPause >= deadline) {
      if (!fd && why != nullptr) *why = reason;
      return fd;
    }
    std::this_thread::sleep_for(kRetryPause);
  }
}

bool can_connect(const Endpoint& to, std::chrono::milliseconds timeout) {
  return bool(try_connect(to, Clock::now() + timeout));
}

}  // namespace cohort::detail::net
