// The socket module's names and addresses (see socket.h): resolving with getaddrinfo's own reason
// when a name does not resolve, whether a name is this machine, which of its addresses routes to a
// peer, and a connected socket's peer as messages print it. IPv4, IPv6 and names behave alike.
#include "core/socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

namespace cohort::detail::net {
namespace {

// A numeric address as text; an IPv4-mapped IPv6 address as its IPv4 form.
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

bool is_loopback(const std::string& address) { return address.rfind("127.", 0) == 0 || address == "::1"; }

// getaddrinfo for a stream socket of any family; the caller frees the list. getaddrinfo's code.
int lookup(const std::string& host, addrinfo** resolved) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  return ::getaddrinfo(host.c_str(), nullptr, &hints, resolved);
}

}  // namespace

std::string resolve_error(const std::string& host) {
  addrinfo* resolved = nullptr;
  const int rc = lookup(host, &resolved);
  if (resolved != nullptr) ::freeaddrinfo(resolved);
  return rc == 0 ? "" : ::gai_strerror(rc);
}

std::vector<std::string> addresses_of(const std::string& host, std::string& error) {
  addrinfo* resolved = nullptr;
  const int rc = lookup(host, &resolved);
  std::vector<std::string> addresses;
  if (rc != 0) {
    error = "cannot resolve host " + host + " (" + ::gai_strerror(rc) + ")";
    return addresses;
  }
  for (addrinfo* a = resolved; a != nullptr; a = a->ai_next) {
    const std::string text = address_text(a->ai_addr);
    if (!text.empty() && std::find(addresses.begin(), addresses.end(), text) == addresses.end())
      addresses.push_back(text);
  }
  ::freeaddrinfo(resolved);
  return addresses;
}

bool is_local_host(const std::string& host) {
  std::string error;
  const std::vector<std::string> resolved = addresses_of(host, error);
  const std::set<std::string> wanted(resolved.begin(), resolved.end());
  if (std::any_of(wanted.begin(), wanted.end(), is_loopback)) return true;
  ifaddrs* interfaces = nullptr;
  if (wanted.empty() || ::getifaddrs(&interfaces) != 0) return false;
  bool local = false;
  for (ifaddrs* i = interfaces; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && wanted.count(address_text(i->ifa_addr))) local = true;
  }
  ::freeifaddrs(interfaces);
  return local;
}

std::optional<std::string> local_address_towards(const Endpoint& to) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(to.host.c_str(), std::to_string(to.port).c_str(), &hints, &resolved) != 0 || resolved == nullptr)
    return std::nullopt;
  std::string address = "127.0.0.1";
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd && ::connect(fd.get(), resolved->ai_addr, resolved->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t size = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &size) == 0)
      address = address_text(reinterpret_cast<const sockaddr*>(&local));
  }
  ::freeaddrinfo(resolved);
  return address;
}

std::string peer_of(int fd) {
  sockaddr_storage peer{};
  socklen_t size = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &size) != 0) return "an unknown peer";
  const auto* address = reinterpret_cast<const sockaddr*>(&peer);
  const int port = address->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port)
                                                 : ntohs(reinterpret_cast<const sockaddr_in6*>(address)->sin6_port);
  return Endpoint{address_text(address), port}.text();
}

}  // namespace cohort::detail::net
