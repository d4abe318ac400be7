// The store server (see store_server.h): a poll loop over the listener, a wake-up eventfd and every
// connection, each a small state machine: unproven (hello sent, waiting for the HMAC proof before a
// deadline), proven (requests answered in order), waiting (a GET or WAIT parked until its keys exist
// or its timeout passes). A peer that breaks the protocol is refused with one log line naming it; a
// flood of them is counted, not logged line by line (core/refusal_log.h).
#include "world/store_server.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "cohort/error.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/log.h"
#include "core/refusal_log.h"
#include "core/socket.h"
#include "world/store_wire.h"

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;
namespace wire = store_wire;

wire::Message reply(uint8_t code, std::vector<std::string> args = {}) { return {code, std::move(args)}; }

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

void warn(const std::string& line) {
  if (!line.empty()) COHORT_WARN(line);
}

}  // namespace

struct StoreServer::State {
  struct Connection {
    net::Fd fd;
    std::string peer;  // ADDRESS:PORT, for log lines
    bool proven = false;
    std::string nonce;  // the server's challenge
    std::string in, out;
    std::optional<Clock::time_point> deadline;  // proof, or the end of a started frame
    std::optional<wire::Message> parked;        // a GET or WAIT whose keys are not all there
    std::optional<Clock::time_point> parked_until;
  };
  StoreServerOptions options;
  net::Fd listen_fd;
  net::Fd wake_fd;
  int port = 0;
  std::string where;
  std::atomic<bool> stopping{false};
  std::map<std::string, std::string> data;
  std::list<Connection> connections;
  std::optional<RefusalLog> refusals;  // once `where` is known
  std::thread thread;

  void run();
  void accept_new();
  bool read_from(Connection& c);  // false: closed or refused
  bool handle_frames(Connection& c);
  bool handle_proof(Connection& c, const wire::Message& m);
  std::optional<wire::Message> answer(Connection& c, const wire::Message& m);
  std::optional<wire::Message> answer_parked(const wire::Message& m);
  void wake_parked();
  void send_now(Connection& c, const wire::Message& m);
  bool flush(Connection& c);
  void refuse(Connection& c, const std::string& why);
  int poll_timeout() const;
};

void StoreServer::State::refuse(Connection& c, const std::string& why) {
  warn(refusals->refused(c.peer, why, Clock::now()));
  const std::string frame = wire::encode(reply(wire::kRefused, {why}));
  (void)!::send(c.fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort
  c.fd.reset();
}

void StoreServer::State::accept_new() {
  for (;;) {
    net::Fd fd = net::accept_one(listen_fd.get());
    if (!fd) return;
    Connection c;
    c.peer = net::peer_of(fd.get());
    c.fd = std::move(fd);
    const auto unproven = std::count_if(connections.begin(), connections.end(),
                                        [](const Connection& k) { return !k.proven; });
    if (unproven >= options.max_unproven) {
      refuse(c, std::to_string(unproven) + " connections are already waiting to prove the job's secret");
      continue;
    }
    c.nonce = random_bytes(32);
    c.deadline = Clock::now() + options.auth_deadline;
    c.out = wire::encode(reply(wire::kHello, {wire::kProtocol, options.run_id, c.nonce}));
    connections.push_back(std::move(c));
    flush(connections.back());
  }
}

bool StoreServer::State::flush(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    c.out.erase(0, size_t(n));
  }
  return true;
}

void StoreServer::State::send_now(Connection& c, const wire::Message& m) { c.out += wire::encode(m); }

bool StoreServer::State::read_from(Connection& c) {
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {  // a peer that leaves: an ended rank, or a stranger that gave up
      if (!c.proven && !c.in.empty()) refuse(c, "closed the connection before proving the job's secret");
      return false;
    }
    c.in.append(chunk, size_t(n));
    // Frames are cut as they arrive, so no buffer grows past one frame's limit and a chunk.
    if (!handle_frames(c)) return false;
  }
  return true;
}

bool StoreServer::State::handle_frames(Connection& c) {
  while (!c.parked) {
    const size_t limit = c.proven ? wire::kFrameLimit : wire::kHandshakeLimit;
    const auto cut = wire::cut_frame(reinterpret_cast<const uint8_t*>(c.in.data()), c.in.size(), limit);
    if (cut.status == wire::FrameCut::kTooLarge) {
      refuse(c, "a message of " + std::to_string(cut.body_bytes) + " bytes is over the limit of " +
                    std::to_string(limit) + (c.proven ? " bytes" : " bytes before the job's secret is proved"));
      return false;
    }
    if (cut.status == wire::FrameCut::kNeedMore) {
      if (c.proven && !c.in.empty() && !c.deadline) c.deadline = Clock::now() + options.frame_deadline;
      return true;
    }
    const auto message = wire::parse_body(reinterpret_cast<const uint8_t*>(c.in.data()) + wire::kHeaderBytes,
                                          cut.body_bytes);
    c.in.erase(0, wire::kHeaderBytes + cut.body_bytes);
    if (!message) {
      refuse(c, "a malformed message");
      return false;
    }
    if (!c.proven) {
      if (!handle_proof(c, *message)) return false;
      continue;
    }
    if (c.in.empty()) c.deadline.reset();
    if (const std::string problem = wire::request_problem(*message); !problem.empty()) {
      refuse(c, problem);
      return false;
    }
    if (auto answered = answer(c, *message)) send_now(c, *answered);
  }
  return true;
}

bool StoreServer::State::handle_proof(Connection& c, const wire::Message& m) {
  if (m.code != wire::kAuth || m.args.size() != 2 || m.args[1].size() != 32) {
    refuse(c, "its first message is not a proof of the job's secret");
    return false;
  }
  if (!same_bytes(m.args[0], hmac_proof(options.secret, "cohort-store-client", c.nonce, m.args[1]))) {
    refuse(c, "it does not know the job's secret (wrong HMAC proof)");
    return false;
  }
  c.proven = true;
  c.deadline.reset();
  send_now(c, reply(wire::kAuthOk, {hmac_proof(options.secret, "cohort-store-server", m.args[1], c.nonce)}));
  return true;
}

std::optional<wire::Message> StoreServer::State::answer(Connection& c, const wire::Message& m) {
  const auto& key = m.args.empty() ? std::string() : m.args[0];
  switch (m.code) {
    case wire::kSet:
      data[key] = m.args[1];
      wake_parked();
      return reply(wire::kOk);
    case wire::kAdd: {
      const auto it = data.find(key);
      int64_t value = 0;
      if (it != data.end()) {
        try {
          value = std::stoll(it->second);
        } catch (const std::exception&) {
          return reply(wire::kRefused, {"the key " + key + " holds a value that is not a number"});
        }
      }
      value += *wire::unpack_i64(m.args[1]);
      data[key] = std::to_string(value);
      wake_parked();
      return reply(wire::kOk, {wire::pack_i64(value)});
    }
    case wire::kCompareSet: {  // c10d's rule: a missing key is set only when `expected` is empty
      const auto it = data.find(key);
      if (it == data.end()) {
        if (!m.args[1].empty()) return reply(wire::kOk, {m.args[1]});
        data[key] = m.args[2];
        wake_parked();
        return reply(wire::kOk, {m.args[2]});
      }
      if (it->second == m.args[1]) {
        it->second = m.args[2];
        wake_parked();
      }
      return reply(wire::kOk, {it->second});
    }
    case wire::kCheck: {
      const bool all = std::all_of(m.args.begin(), m.args.end(), [&](const std::string& k) { return data.count(k); });
      return reply(wire::kOk, {std::string(1, char(all))});
    }
    case wire::kDelete: {
      const bool erased = data.erase(key) > 0;
      return reply(wire::kOk, {std::string(1, char(erased))});
    }
    case wire::kNumKeys: return reply(wire::kOk, {wire::pack_i64(int64_t(data.size()))});
    default: break;  // kGet, kWait: answered now, or parked until the keys exist
  }
  if (auto now = answer_parked(m)) return now;
  const int64_t ms = *wire::unpack_i64(m.code == wire::kGet ? m.args[1] : m.args[0]);
  c.parked = m;
  if (ms > 0) c.parked_until = Clock::now() + std::chrono::milliseconds(ms);
  return std::nullopt;
}

// The answer to a GET or WAIT whose keys all exist, else nullopt.
std::optional<wire::Message> StoreServer::State::answer_parked(const wire::Message& m) {
  if (m.code == wire::kGet) {
    const auto it = data.find(m.args[0]);
    if (it == data.end()) return std::nullopt;
    return reply(wire::kOk, {it->second});
  }
  for (size_t i = 1; i < m.args.size(); ++i)
    if (!data.count(m.args[i])) return std::nullopt;
  return reply(wire::kOk);
}

void StoreServer::State::wake_parked() {
  for (auto& c : connections) {
    if (!c.fd || !c.parked) continue;
    if (auto now = answer_parked(*c.parked)) {
      send_now(c, *now);
      c.parked.reset();
      c.parked_until.reset();
    }
  }
}

int StoreServer::State::poll_timeout() const {
  auto soonest = Clock::now() + std::chrono::seconds(1);
  for (const auto& c : connections) {
    if (c.deadline) soonest = std::min(soonest, *c.deadline);
    if (c.parked_until) soonest = std::min(soonest, *c.parked_until);
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - Clock::now()).count();
  return int(std::max<int64_t>(ms + 1, 0));
}

void StoreServer::State::run() {
  std::vector<pollfd> fds;
  while (!stopping.load()) {
    fds.assign({{listen_fd.get(), POLLIN, 0}, {wake_fd.get(), POLLIN, 0}});
    for (const auto& c : connections) fds.push_back({c.fd.get(), short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (net::poll_fds(fds, poll_timeout()) < 0) break;
    if (stopping.load()) break;
    size_t i = 2;
    const auto now = Clock::now();
    for (auto& c : connections) {
      const short events = fds[i++].revents;
      bool alive = true;
      if (events & (POLLIN | POLLHUP | POLLERR)) alive = read_from(c);
      if (alive && c.deadline && now >= *c.deadline) {
        refuse(c, c.proven ? "it sent part of a message and nothing more for " + ms_text(options.frame_deadline)
                           : "it did not prove the job's secret within " + ms_text(options.auth_deadline));
        alive = false;
      }
      if (alive && c.parked_until && now >= *c.parked_until) {
        send_now(c, reply(wire::kTimedOut));
        c.parked.reset();
        c.parked_until.reset();
      }
      // Requests that arrived behind a parked one (a client sends one at a time, but need not).
      if (alive && c.proven && !c.parked && !c.in.empty()) alive = handle_frames(c);
      if (alive && !flush(c)) alive = false;
      if (!alive) c.fd.reset();
    }
    connections.remove_if([](const Connection& c) { return !c.fd; });
    if (fds[0].revents & POLLIN) accept_new();
    warn(refusals->due(Clock::now()));  // poll wakes at least every second (poll_timeout)
  }
}

StoreServer::StoreServer(const StoreServerOptions& options) : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.options = options;
  std::string error;
  s.listen_fd = net::listen_on(options.bind_address, options.port, error);
  const std::string address = options.bind_address.empty() ? "every interface" : options.bind_address;
  COHORT_CHECK_KIND(kIO, s.listen_fd, "rank 0 cannot host the rendezvous store at ", address, ":", options.port, ": ",
                    error);
  s.port = net::port_of(s.listen_fd.get());
  s.where = (options.bind_address.empty() ? "*" : options.bind_address) + ":" + std::to_string(s.port);
  s.refusals.emplace("rendezvous store at " + s.where, options.refusal_log_interval);
  s.wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  s.thread = std::thread([&s] { s.run(); });
}

StoreServer::~StoreServer() {
  auto& s = *state_;
  s.stopping = true;
  uint64_t one = 1;
  (void)!::write(s.wake_fd.get(), &one, sizeof one);
  s.thread.join();                        // the connections, the listener and the eventfd close with the state
  warn(s.refusals->flush(Clock::now()));  // the refusals counted since the last line
}

int StoreServer::port() const { return state_->port; }
std::string StoreServer::where() const { return state_->where; }

}  // namespace cohort::detail
