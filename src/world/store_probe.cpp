// read_store_key (see store_probe.h): LibTorch 1.13's wire format over a plain socket, or a LibTorch
// 2.x TCPStore client on a thread of its own.
#include "world/store_probe.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "world/net.h"

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(left) : 0;
}

std::string within(std::chrono::milliseconds timeout) {
  return "within " + std::to_string(timeout.count()) + " ms";
}

#if TORCH_VERSION_MAJOR < 2

// LibTorch 1.13's TCPStore protocol (torch/csrc/distributed/c10d/TCPStore.cpp): a query is one byte of
// QueryType followed by its arguments, a string is a uint64 length and its bytes, a CHECK takes a
// count of keys, and the client API puts "/" before every key.
constexpr uint8_t kQueryGet = 2;
constexpr uint8_t kQueryCheck = 4;
constexpr uint8_t kCheckReady = 0;
constexpr const char* kKeyPrefix = "/";
// A job id is a few dozen bytes: a longer answer means the listener is not speaking this protocol.
constexpr uint64_t kLargestValue = 1 << 20;

void put_u64(std::vector<uint8_t>& out, uint64_t value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

void put_string(std::vector<uint8_t>& out, const std::string& text) {
  put_u64(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

// Whole messages over a non-blocking socket, every wait bounded by one deadline.
class WireConnection {
 public:
  WireConnection(int fd, Clock::time_point deadline, std::chrono::milliseconds timeout)
      : fd_(fd), deadline_(deadline), timeout_(timeout) {}
  ~WireConnection() { ::close(fd_); }
  WireConnection(const WireConnection&) = delete;
  WireConnection& operator=(const WireConnection&) = delete;

  bool send(const std::vector<uint8_t>& bytes) {
    for (size_t done = 0; done < bytes.size();) {
      if (!ready(POLLOUT)) return false;
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return fail_with_errno();
      done += size_t(n);
    }
    return true;
  }

  bool receive(void* data, size_t size) {
    auto* out = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < size;) {
      if (!ready(POLLIN)) return false;
      const ssize_t n = ::recv(fd_, out + done, size - done, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n == 0) return fail("the store closed the connection");
      if (n < 0) return fail_with_errno();
      done += size_t(n);
    }
    return true;
  }

  bool fail(const std::string& why) {
    failure_ = why;
    return false;
  }
  const std::string& failure() const { return failure_; }

 private:
  bool ready(short events) {
    pollfd waiting{fd_, events, 0};
    for (;;) {
      const int n = ::poll(&waiting, 1, ms_left(deadline_));
      if (n > 0) return true;
      if (n < 0 && errno == EINTR) continue;
      return fail("no answer " + within(timeout_));
    }
  }
  bool fail_with_errno() { return fail(std::string("the connection failed: ") + std::strerror(errno)); }

  int fd_;
  Clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  std::string failure_;
};

StoreKeyRead read_over_wire(int fd, const std::string& key, Clock::time_point deadline,
                            std::chrono::milliseconds timeout) {
  WireConnection wire(fd, deadline, timeout);
  const std::string wire_key = kKeyPrefix + key;
  for (;;) {  // CHECK until the key exists: a WAIT would leave this socket registered if we gave up
    std::vector<uint8_t> check{kQueryCheck};
    put_u64(check, 1);
    put_string(check, wire_key);
    uint8_t answer = 0xff;
    if (!wire.send(check) || !wire.receive(&answer, 1)) return {std::nullopt, wire.failure()};
    if (answer == kCheckReady) break;
    if (ms_left(deadline) < 20) return {std::nullopt, "the key " + key + " did not appear " + within(timeout)};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<uint8_t> get{kQueryGet};
  put_string(get, wire_key);
  uint64_t size = 0;
  if (!wire.send(get) || !wire.receive(&size, sizeof size)) return {std::nullopt, wire.failure()};
  if (size > kLargestValue) return {std::nullopt, "the listener does not answer as a TCPStore"};
  std::vector<uint8_t> value(size);
  if (!wire.receive(value.data(), value.size())) return {std::nullopt, wire.failure()};
  return {std::move(value), ""};
}

#else

// A c10d client on a thread that is left behind if it does not answer in time (it holds only copies
// and ends with the process): LibTorch 2.x's handshake blocks without a timeout on a silent listener.
StoreKeyRead read_with_client(const std::string& host, int port, const std::string& key,
                              std::chrono::milliseconds timeout) {
  auto answer = std::make_shared<std::promise<StoreKeyRead>>();
  auto future = answer->get_future();
  std::thread([answer, host, port, key, timeout] {
    StoreKeyRead read;
    try {
      c10d::TCPStoreOptions options;
      options.port = uint16_t(port);
      options.isServer = false;
      options.waitWorkers = false;
      options.timeout = timeout;
      c10d::TCPStore store(host, options);
      store.wait({key}, timeout);
      read.value = store.get(key);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      read.failure = what.substr(0, what.find('\n'));
    }
    answer->set_value(std::move(read));
  }).detach();
  if (future.wait_for(timeout + std::chrono::milliseconds(500)) != std::future_status::ready)
    return {std::nullopt, "no answer " + within(timeout)};
  return future.get();
}

#endif

}  // namespace

StoreKeyRead read_store_key(const std::string& host, int port, const std::string& key,
                            std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const int fd = launch::connect_to(host, port, std::max(1, ms_left(deadline)));
  if (fd < 0) return {std::nullopt, "nothing accepted a connection at " + host + ":" + std::to_string(port)};
#if TORCH_VERSION_MAJOR < 2
  return read_over_wire(fd, key, deadline, timeout);
#else
  ::close(fd);  // c10d's client would retry a refused connection, logging each try
  return read_with_client(host, port, key, timeout);
#endif
}

}  // namespace cohort::detail
