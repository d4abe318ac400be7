// The wire format of cohort's rendezvous store (store_server.h, store_client.h): every message, both
// ways, is a frame `u32 length | body`, and a body is `u8 code | u32 count | count x (u32 size | bytes)`.
// Sizes are checked against a limit before anything is allocated, so a header that claims 3 GB is
// refused after its first four bytes. Pure functions, fuzzed by fuzz/store_request_fuzz.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cohort::detail::store_wire {

enum Code : uint8_t {
  // handshake
  kHello = 1,   // server: "cohort-store-1", run id, server nonce
  kAuth = 2,    // client: HMAC proof, client nonce
  kAuthOk = 3,  // server: HMAC proof of the client's nonce
  // requests
  kSet = 10,         // key, value
  kGet = 11,         // key, timeout ms (8 bytes): waits for the key
  kAdd = 12,         // key, delta (8 bytes)
  kCompareSet = 13,  // key, expected, desired
  kCheck = 14,       // keys...
  kWait = 15,        // timeout ms (8 bytes), keys...
  kDelete = 16,      // key
  kNumKeys = 17,     //
  // replies
  kOk = 100,        // results...
  kTimedOut = 101,  // (a wait or get that ran out of time)
  kRefused = 102,   // why
};

constexpr const char* kProtocol = "cohort-store-1";
/// Largest frame before the peer has proved the job's secret (the handshake is under 200 bytes).
constexpr size_t kHandshakeLimit = 1024;
/// Largest frame of an authenticated peer: a key or value of the rendezvous is at most a few KiB,
/// checkpoints' store exchanges a few MiB.
constexpr size_t kFrameLimit = size_t(64) << 20;
constexpr size_t kHeaderBytes = 4;

struct Message {
  uint8_t code = 0;
  std::vector<std::string> args;
};

/// Where the next frame in `data` stands: incomplete, complete (`body_bytes` follow the header), or
/// over `limit` (refuse the peer; nothing was allocated).
struct FrameCut {
  enum Status { kNeedMore, kReady, kTooLarge } status = kNeedMore;
  size_t body_bytes = 0;
};
FrameCut cut_frame(const uint8_t* data, size_t size, size_t limit);

/// The message in one frame body, or nullopt when it is malformed (counts or sizes past its end,
/// bytes left over).
std::optional<Message> parse_body(const uint8_t* body, size_t size);

/// The frame of `message` (header included).
std::string encode(const Message& message);

/// Why a request is not one the server can answer ("" when it is): an unknown code or the wrong
/// number of arguments.
std::string request_problem(const Message& request);

/// 8-byte little-endian numbers inside arguments.
std::string pack_i64(int64_t value);
std::optional<int64_t> unpack_i64(const std::string& bytes);

}  // namespace cohort::detail::store_wire
