// The store client (see store_client.h): connect, check the hello, prove the secret and check the
// server's proof, then one request and one reply at a time, every wait bounded by a deadline.
#include "world/store_client.h"

#include <algorithm>

#include "cohort/error.h"
#include "comm/control_plane.h"
#include "core/check.h"
#include "core/job_secret.h"
#include "core/socket.h"

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;
namespace wire = store_wire;

// A timeout of 0 is c10d's "no timeout".
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
}

// "" when every byte went out by `deadline`, else why not.
std::string send_all(int fd, const std::string& bytes, Clock::time_point deadline) {
  return net::write_all(fd, bytes, deadline).why;
}

std::string receive_all(int fd, char* out, size_t size, Clock::time_point deadline) {
  const net::IoResult got = net::read_exact(fd, out, size, deadline);
  return got.status == net::IoResult::kClosed ? "the store closed the connection" : got.why;
}

// One whole frame of at most `limit` bytes; "" on success, else why not.
std::string read_frame(int fd, Clock::time_point deadline, size_t limit, wire::Message& out) {
  char header[wire::kHeaderBytes];
  if (auto why = receive_all(fd, header, sizeof header, deadline); !why.empty()) return why;
  const auto cut = wire::cut_frame(reinterpret_cast<const uint8_t*>(header), sizeof header, limit);
  if (cut.status == wire::FrameCut::kTooLarge) return "the listener does not speak cohort's store protocol";
  std::string body(cut.body_bytes, '\0');
  if (auto why = receive_all(fd, &body[0], body.size(), deadline); !why.empty()) return why;
  auto message = wire::parse_body(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  if (!message) return "the listener does not speak cohort's store protocol";
  out = std::move(*message);
  return "";
}

// Connects to a listener, retrying quietly until `deadline`, and reads its hello.
net::Fd open_and_greet(const net::Endpoint& to, Clock::time_point deadline, wire::Message& hello,
                       std::string& failure) {
  std::string why;
  net::Fd fd = net::connect_until(to, deadline, &why);
  if (!fd) {
    failure = "nothing accepted a connection at " + to.text() + " (" + why + ")";
    return fd;
  }
  failure = read_frame(fd.get(), deadline, wire::kHandshakeLimit, hello);
  if (failure.empty() && (hello.code != wire::kHello || hello.args.size() != 3 || hello.args[0] != wire::kProtocol ||
                          hello.args[2].size() != 32))
    failure = "the listener does not speak cohort's store protocol";
  if (!failure.empty()) fd.reset();
  return fd;
}

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string to_text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string keys_text(const std::vector<std::string>& keys) {
  std::string text;
  for (const auto& key : keys) text += (text.empty() ? "" : ", ") + key;
  return text;
}

}  // namespace

StoreHello read_store_hello(const std::string& host, int port, std::chrono::milliseconds timeout) {
  wire::Message hello;
  std::string failure;
  if (!open_and_greet({host, port}, Clock::now() + timeout, hello, failure)) return {std::nullopt, failure};
  return {hello.args[1], ""};
}

CohortStore::CohortStore(const StoreClientOptions& options, std::shared_ptr<StoreServer> server)
    : StoreBase(options.timeout), options_(options), server_(std::move(server)) {
  const auto deadline = deadline_after(options.timeout);
  wire::Message hello;
  std::string failure;
  fd_ = open_and_greet({options.host, options.port}, deadline, hello, failure);
  COHORT_CHECK_KIND(kTimeout, fd_, "cannot connect to the rendezvous store at ", where(), " within ",
                    options.timeout.count(), " ms: ", failure);
  const std::string mine = random_bytes(32);
  const std::string proof = hmac_proof(options.secret, "cohort-store-client", hello.args[2], mine);
  wire::Message answer;
  failure = send_all(fd_.get(), wire::encode({wire::kAuth, {proof, mine}}), deadline);
  if (failure.empty()) failure = read_frame(fd_.get(), deadline, wire::kHandshakeLimit, answer);
  // The handshake's bytes that did not go through are I/O; a store that is not this job's is a
  // setting to fix (each job its own port and secret), as the control plane's handshake says it.
  ErrorKind kind = ErrorKind::kIO;
  if (failure.empty() && answer.code == wire::kRefused && answer.args.size() == 1) {
    failure = "it refused this rank (" + answer.args[0] +
              "): every rank needs the job's secret, "
              "and this one's comes from " +
              options.secret_source + " (docs/security.md)";
    kind = ErrorKind::kInvalidArgument;
  } else if (failure.empty() &&
             (answer.code != wire::kAuthOk || answer.args.size() != 1 ||
              !same_bytes(answer.args[0], hmac_proof(options.secret, "cohort-store-server", mine, hello.args[2])))) {
    failure = "it did not prove it knows the job's secret: another job's store, or not a store of this job";
    kind = ErrorKind::kInvalidArgument;
  }
  if (!failure.empty()) {
    fd_.reset();
    const Error error("rendezvous store at " + where() + " (" + job_label(hello.args[1]) + "): " + failure, kind);
    throw error;
  }
}

CohortStore::~CohortStore() = default;

std::string CohortStore::where() const { return options_.host + ":" + std::to_string(options_.port); }

wire::Message CohortStore::call(const wire::Message& request, const std::string& what, std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  COHORT_CHECK_KIND(kIO, fd_, "rendezvous store at ", where(), ": ", what, " failed: the connection was lost earlier");
  const auto limit = getTimeout();
  // The server answers a parked request when its own timer ends; a little longer here covers the trip.
  const auto deadline = limit.count() > 0 || wait.count() > 0
                            ? Clock::now() + limit + wait + std::chrono::seconds(wait.count() > 0 ? 5 : 0)
                            : Clock::time_point::max();
  const std::string frame = wire::encode(request);
  COHORT_CHECK_KIND(kInvalidArgument, frame.size() - wire::kHeaderBytes <= wire::kFrameLimit, "rendezvous store at ",
                    where(), ": ", what, " is ", frame.size(), " bytes, over the store's limit of ", wire::kFrameLimit,
                    " bytes");
  wire::Message reply;
  std::string failure = send_all(fd_.get(), frame, deadline);
  if (failure.empty()) failure = read_frame(fd_.get(), deadline, wire::kFrameLimit, reply);
  if (failure.empty() && reply.code == wire::kRefused)
    failure = reply.args.empty() ? "the store refused it" : reply.args[0];
  else if (failure.empty() && reply.code != wire::kOk && reply.code != wire::kTimedOut)
    failure = "the store answered with code " + std::to_string(int(reply.code));
  if (!failure.empty()) {
    if (reply.code != wire::kRefused) fd_.reset();  // the stream is out of step now: never reuse it
    // Refused: the request itself (adding to a key that holds no number); else the connection failed.
    throw Error("rendezvous store at " + where() + ": " + what + " failed: " + failure,
                reply.code == wire::kRefused ? ErrorKind::kInvalidArgument : ErrorKind::kIO);
  }
  return reply;
}

void CohortStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  call({wire::kSet, {key, to_text(value)}}, "setting key " + key);
}

std::vector<uint8_t> CohortStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  const auto reply = call({wire::kCompareSet, {key, to_text(expected), to_text(desired)}}, "compare-set of key " + key);
  COHORT_CHECK_KIND(kInternal, reply.args.size() == 1, "rendezvous store at ", where(),
                    ": a malformed compare-set answer");
  return to_bytes(reply.args[0]);
}

std::vector<uint8_t> CohortStore::get(const std::string& key) {
  const auto timeout = getTimeout();
  const auto reply = call({wire::kGet, {key, wire::pack_i64(timeout.count())}}, "getting key " + key, timeout);
  COHORT_CHECK_KIND(kTimeout, reply.code == wire::kOk && reply.args.size() == 1, "rendezvous store at ", where(),
                    ": getting key ", key, " timed out after ", timeout.count(), " ms (no rank set it)");
  return to_bytes(reply.args[0]);
}

int64_t CohortStore::add(const std::string& key, int64_t value) {
  const auto reply = call({wire::kAdd, {key, wire::pack_i64(value)}}, "adding to key " + key);
  const auto sum = reply.args.size() == 1 ? wire::unpack_i64(reply.args[0]) : std::nullopt;
  COHORT_CHECK_KIND(kInternal, sum.has_value(), "rendezvous store at ", where(), ": a malformed add answer");
  return *sum;
}

bool CohortStore::deleteKey(const std::string& key) {
  const auto reply = call({wire::kDelete, {key}}, "deleting key " + key);
  return reply.args.size() == 1 && reply.args[0] == std::string(1, '\1');
}

bool CohortStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  const auto reply = call({wire::kCheck, keys}, "checking keys " + keys_text(keys));
  return reply.args.size() == 1 && reply.args[0] == std::string(1, '\1');
}

int64_t CohortStore::getNumKeys() {
  const auto reply = call({wire::kNumKeys, {}}, "counting keys");
  const auto count = reply.args.size() == 1 ? wire::unpack_i64(reply.args[0]) : std::nullopt;
  COHORT_CHECK_KIND(kInternal, count.has_value(), "rendezvous store at ", where(), ": a malformed count answer");
  return *count;
}

void CohortStore::wait(const std::vector<std::string>& keys) { wait(keys, getTimeout()); }

void CohortStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  if (keys.empty()) return;
  std::vector<std::string> args{wire::pack_i64(timeout.count())};
  args.insert(args.end(), keys.begin(), keys.end());
  const auto reply = call({wire::kWait, args}, "waiting for keys " + keys_text(keys), timeout);
  COHORT_CHECK_KIND(kTimeout, reply.code == wire::kOk, "rendezvous store at ", where(), ": waiting for keys ",
                    keys_text(keys), " timed out after ", timeout.count(), " ms");
}

c10::intrusive_ptr<c10d::Store> CohortStore::clone_store() {
  auto options = options_;
  options.timeout = getTimeout();
  return c10::make_intrusive<CohortStore>(options, server_);
}

}  // namespace cohort::detail
