// The socket module's listeners (see socket.h): listening on one numeric address or every interface,
// accepting, and the free-port probes a launcher needs before any listener exists (a port that was
// free a moment ago; whether a port is held on this machine).
#include "core/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace cohort::detail::net {
namespace {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t size = 0;  // 0: not a numeric address
};

// The socket address of `address` ("" every interface, IPv4 and IPv6) and `port`.
SocketAddress socket_address(const std::string& address, int port) {
  SocketAddress where;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&where.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&where.storage);
  if (!address.empty() && ::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(uint16_t(port));
    where.size = sizeof(sockaddr_in);
    return where;
  }
  if (address.empty()) v6->sin6_addr = in6addr_any;
  else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) != 1) return where;
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(uint16_t(port));
  where.size = sizeof(sockaddr_in6);
  return where;
}

enum class Reuse { kNo, kAddress };  // kAddress: SO_REUSEADDR, as a listener binds

// A socket bound to `address` (dual-stack when it is IPv6's any); empty with errno set when the bind
// fails. `flags`: SOCK_NONBLOCK or 0.
Fd bound_socket(const SocketAddress& where, int flags, Reuse reuse) {
  const sockaddr_storage& address = where.storage;
  Fd fd(::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
  if (!fd) return fd;
  int one = 1, off = 0;
  if (reuse == Reuse::kAddress) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
  if (address.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr))
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), where.size) != 0) {
    const int error = errno;
    fd.reset();
    errno = error;
  }
  return fd;
}

}  // namespace

Fd listen_on(const std::string& address, int port, std::string& error) {
  const SocketAddress where = socket_address(address, port);
  if (where.size == 0) {
    error = "not a numeric address";
    return Fd();
  }
  Fd fd = bound_socket(where, SOCK_NONBLOCK, Reuse::kAddress);
  if (!fd || ::listen(fd.get(), 4096) != 0) {
    error = std::strerror(errno);
    return Fd();
  }
  return fd;
}

Fd accept_one(int listen_fd) { return Fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC)); }

int pick_free_port() {
  Fd fd = bound_socket(socket_address("", 0), 0, Reuse::kNo);
  if (!fd) fd = bound_socket(socket_address("0.0.0.0", 0), 0, Reuse::kNo);  // no IPv6 on this machine
  return fd ? port_of(fd.get()) : 0;
}

bool port_in_use(int port) {
  for (const char* any : {"", "0.0.0.0"}) {
    if (!bound_socket(socket_address(any, port), 0, Reuse::kAddress) && errno == EADDRINUSE) return true;
  }
  return false;
}

int port_of(int fd) {
  sockaddr_storage mine{};
  socklen_t size = sizeof mine;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &size) != 0) return 0;
  return mine.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(&mine)->sin_port)
                                   : ntohs(reinterpret_cast<const sockaddr_in6*>(&mine)->sin6_port);
}

}  // namespace cohort::detail::net
