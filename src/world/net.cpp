// Socket helpers for the rendezvous (see net.h), on getaddrinfo/getifaddrs so IPv4, IPv6 and names
// behave alike.
#include "world/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

namespace cohort::detail::launch {
namespace {

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      ::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    }
  }
  return text;
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1";
}

}  // namespace

std::string resolve_error(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &resolved);
  if (resolved != nullptr) ::freeaddrinfo(resolved);
  return rc == 0 ? "" : ::gai_strerror(rc);
}

bool is_local_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &resolved) != 0) return false;
  std::set<std::string> wanted;
  for (addrinfo* a = resolved; a != nullptr; a = a->ai_next) wanted.insert(address_text(a->ai_addr));
  ::freeaddrinfo(resolved);
  for (const auto& address : wanted) {
    if (is_loopback(address)) return true;
  }
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return false;
  bool local = false;
  for (ifaddrs* i = interfaces; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && wanted.count(address_text(i->ifa_addr))) local = true;
  }
  ::freeifaddrs(interfaces);
  return local;
}

int pick_free_port() {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      socklen_t size = sizeof address;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
      ::close(fd);
      return ntohs(address.sin6_port);
    }
    ::close(fd);
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // no IPv6 on this machine
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    socklen_t size = sizeof address;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

int connect_to(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &resolved) != 0) {
    return -1;
  }
  int connected = -1;
  for (addrinfo* a = resolved; a != nullptr && connected < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!ok && errno == EINPROGRESS) {
      pollfd waiting{fd, POLLOUT, 0};
      int error = 0;
      socklen_t size = sizeof error;
      ok = ::poll(&waiting, 1, timeout_ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 &&
           error == 0;
    }
    if (ok) connected = fd;
    else ::close(fd);
  }
  ::freeaddrinfo(resolved);
  return connected;
}

bool can_connect(const std::string& host, int port, int timeout_ms) {
  const int fd = connect_to(host, port, timeout_ms);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

int listen_on(const std::string& address, int port, std::string& error) {
  sockaddr_storage where{};
  socklen_t size = 0;
  int family = AF_INET6;
  if (address.empty()) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&where);
    v6->sin6_family = AF_INET6;
    v6->sin6_addr = in6addr_any;
    v6->sin6_port = htons(uint16_t(port));
    size = sizeof(sockaddr_in6);
  } else if (auto* v4 = reinterpret_cast<sockaddr_in*>(&where); ::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    family = v4->sin_family = AF_INET;
    v4->sin_port = htons(uint16_t(port));
    size = sizeof(sockaddr_in);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&where);
    if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) != 1) {
      error = "not a numeric address";
      return -1;
    }
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(uint16_t(port));
    size = sizeof(sockaddr_in6);
  }
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int one = 1, off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (address.empty()) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&where), size) != 0 || ::listen(fd, 1024) != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string peer_of(int fd) {
  sockaddr_storage peer{};
  socklen_t size = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &size) != 0) return "an unknown peer";
  const auto* address = reinterpret_cast<const sockaddr*>(&peer);
  const int port = address->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port)
                                                 : ntohs(reinterpret_cast<const sockaddr_in6*>(address)->sin6_port);
  const std::string text = address_text(address);
  return (text.find(':') != std::string::npos ? "[" + text + "]" : text) + ":" + std::to_string(port);
}

int port_of(int fd) {
  sockaddr_storage mine{};
  socklen_t size = sizeof mine;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &size) != 0) return 0;
  const auto* address = reinterpret_cast<const sockaddr*>(&mine);
  return address->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port)
                                       : ntohs(reinterpret_cast<const sockaddr_in6*>(address)->sin6_port);
}

}  // namespace cohort::detail::launch
