// The few socket facts the rendezvous needs: whether a host name is one of this machine's addresses
// (that node hosts the c10d store, as in torchelastic), a free TCP port, and whether a port accepts
// connections yet (probing before c10d connects keeps c10d's retry warnings out of the output).
#pragma once

#include <string>

namespace cohort::detail::launch {

/// Why `host` does not resolve (getaddrinfo's message), or "" when it does.
std::string resolve_error(const std::string& host);

/// True when `host` resolves to an address of one of this machine's interfaces (or to loopback).
bool is_local_host(const std::string& host);

/// A TCP port that was free a moment ago on every address of this machine (0 on failure).
int pick_free_port();

/// A non-blocking socket connected to host:port within `timeout_ms` (the caller closes it), or -1.
int connect_to(const std::string& host, int port, int timeout_ms);

/// True when a TCP connection to host:port succeeds within `timeout_ms`.
bool can_connect(const std::string& host, int port, int timeout_ms);

/// A non-blocking socket listening at address:port (a numeric address; "" is every interface, IPv4
/// and IPv6), or -1 with `error` saying why (strerror of the failing call, e.g. "Address already in use").
int listen_on(const std::string& address, int port, std::string& error);

/// "ADDRESS:PORT" of the peer of a connected socket (or "an unknown peer").
std::string peer_of(int fd);

/// The port a listening socket holds.
int port_of(int fd);

}  // namespace cohort::detail::launch
