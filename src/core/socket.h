// cohort's one socket module: every TCP connection, listener and poll(2) of the library and its tools
// goes through here (the control plane, the rendezvous store and its probes, cohortrun), so descriptors
// close themselves (Fd), every wait has a deadline, and a failure says which host:port, which operation
// and errno's text. No other file calls ::connect, ::accept or ::poll (tests/style/socket_calls_check.py).
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace cohort::detail::net {

using Clock = std::chrono::steady_clock;

/// An owned file descriptor, closed when the Fd is destroyed or reset (move-only).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  int release();
  /// Closes the held descriptor (if any) and holds `fd` instead.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// Milliseconds left until `deadline` as poll(2) takes them: 0 once passed, -1 for Clock::time_point::max().
int ms_until(Clock::time_point deadline);

/// poll(2) over `fds` (sockets, pipes, eventfds) for at most `timeout_ms` (-1: no limit), started again
/// with the time left when a signal interrupts it. The count of ready descriptors, 0 when the time
/// passed, -1 on another error (errno says which).
int poll_fds(pollfd* fds, size_t count, int timeout_ms);
inline int poll_fds(std::vector<pollfd>& fds, int timeout_ms) { return poll_fds(fds.data(), fds.size(), timeout_ms); }

/// True when `fd` reports one of `events` (or an error or hang-up) before `deadline`.
bool wait_for(int fd, short events, Clock::time_point deadline);

/// Where a connection goes, as messages name it: "HOST:PORT" ("[ADDR]:PORT" for an IPv6 literal).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string text() const;
};

/// One attempt to connect to each address `to.host` resolves to, before `deadline`: a blocking socket
/// (close-on-exec), or an empty Fd with `why` (when given) the reason, for the caller's message that
/// names the endpoint (to.text()): errno's text ("Connection refused"), "no answer within N ms", or
/// "cannot resolve host HOST (REASON)".
Fd try_connect(const Endpoint& to, Clock::time_point deadline, std::string* why = nullptr);

/// try_connect again every 20 ms until `deadline` (while nothing listens yet); `why` is the last
/// attempt's reason when none succeeded. A host that does not resolve is not tried again.
Fd connect_until(const Endpoint& to, Clock::time_point deadline, std::string* why = nullptr);

/// True when a connection to `to` succeeds within `timeout` (closed at once).
bool can_connect(const Endpoint& to, std::chrono::milliseconds timeout);

/// How a read or write that must move every byte ended; `why` is "" when done, else one line.
struct IoResult {
  enum Status { kDone, kTimedOut, kClosed, kFailed } status = kDone;
  std::string why;  // "no answer before the deadline", "the peer closed the connection",
                    // "no progress sending before the deadline", "the connection failed: <errno text>"
  bool ok() const { return status == kDone; }
};

/// Reads exactly `size` bytes from `fd` before `deadline` (Clock::time_point::max(): no limit).
IoResult read_exact(int fd, void* out, size_t size, Clock::time_point deadline);

/// Writes every byte of `data` to `fd` before `deadline` (never raises SIGPIPE). A deadline already
/// passed sends what fits now without waiting.
IoResult write_all(int fd, const void* data, size_t size, Clock::time_point deadline);
inline IoResult write_all(int fd, const std::string& bytes, Clock::time_point deadline) {
  return write_all(fd, bytes.data(), bytes.size(), deadline);
}

/// Sends small messages at once (no Nagle delay): the control plane's frames.
void set_nodelay(int fd);

/// Puts TCP congestion control `name` ("reno", "cubic", "bbr") on `fd`: "" when done, else one line
/// saying why not (errno's text and the kernel's lists of available and allowed algorithms).
std::string set_congestion_control(int fd, const std::string& name);
/// Whether this process may put `name` on its TCP sockets: "" when it may, else why (tried on a new socket).
std::string congestion_control_refused(const std::string& name);

/// A non-blocking listener at address:port (a numeric IPv4 or IPv6 address; "" is every interface,
/// IPv4 and IPv6; port 0 any free one), or an empty Fd with `error` saying why (errno's text, e.g.
/// "Address already in use", or "not a numeric address").
Fd listen_on(const std::string& address, int port, std::string& error);

/// The next connection waiting on a listener as a blocking socket (close-on-exec); an empty Fd when
/// none waits (or it failed: errno says which).
Fd accept_one(int listen_fd);

/// A TCP port that was free a moment ago on every address of this machine (0 on failure).
int pick_free_port();

/// True when something listens at `port` on this machine: a bind with SO_REUSEADDR (as a listener
/// takes it) fails with "Address already in use".
bool port_in_use(int port);

/// The port a socket is bound to (0 when it is not).
int port_of(int fd);

/// "ADDRESS:PORT" of the peer of a connected socket (or "an unknown peer").
std::string peer_of(int fd);

/// Why `host` does not resolve (getaddrinfo's message, e.g. "Name or service not known"), or "".
std::string resolve_error(const std::string& host);

/// The numeric addresses `host` resolves to (IPv4 and IPv6, in resolver order, no repeats); empty with
/// `error` = "cannot resolve host HOST (REASON)" when it does not resolve.
std::vector<std::string> addresses_of(const std::string& host, std::string& error);

/// True when `host` resolves to an address of one of this machine's interfaces (or to loopback).
bool is_local_host(const std::string& host);

/// The IPv4 address of this machine's interface that routes to `to` (a connected UDP socket sends
/// nothing but makes the kernel pick the route); 127.0.0.1 when there is no route; nullopt when
/// `to.host` has no IPv4 address.
std::optional<std::string> local_address_towards(const Endpoint& to);

}  // namespace cohort::detail::net
