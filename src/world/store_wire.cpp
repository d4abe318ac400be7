// Frames and bodies of the store's wire format (see store_wire.h).
#include "world/store_wire.h"

#include <cstring>

namespace cohort::detail::store_wire {
namespace {

uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

FrameCut cut_frame(const uint8_t* data, size_t size, size_t limit) {
  if (size < kHeaderBytes) return {};
  const size_t body = read_u32(data);
  if (body > limit) return {FrameCut::kTooLarge, body};
  if (size - kHeaderBytes < body) return {FrameCut::kNeedMore, body};
  return {FrameCut::kReady, body};
}

std::optional<Message> parse_body(const uint8_t* body, size_t size) {
  if (size < 5) return std::nullopt;
  Message message;
  message.code = body[0];
  const uint32_t count = read_u32(body + 1);
  size_t at = 5;
  // Each argument takes at least its 4-byte size: a count beyond that is a lie, refused before reserve.
  if (count > (size - at) / 4) return std::nullopt;
  message.args.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (size - at < 4) return std::nullopt;
    const uint32_t length = read_u32(body + at);
    at += 4;
    if (length > size - at) return std::nullopt;
    message.args.emplace_back(reinterpret_cast<const char*>(body + at), length);
    at += length;
  }
  if (at != size) return std::nullopt;
  return message;
}

std::string encode(const Message& message) {
  size_t body = 5;
  for (const auto& arg : message.args) body += 4 + arg.size();
  std::string out;
  out.reserve(kHeaderBytes + body);
  put_u32(out, uint32_t(body));
  out += char(message.code);
  put_u32(out, uint32_t(message.args.size()));
  for (const auto& arg : message.args) {
    put_u32(out, uint32_t(arg.size()));
    out += arg;
  }
  return out;
}

std::string request_problem(const Message& request) {
  const size_t n = request.args.size();
  const auto needs = [&](bool ok, const char* what) { return ok ? std::string() : std::string(what); };
  switch (request.code) {
    case kSet: return needs(n == 2, "SET takes a key and a value");
    case kGet: return needs(n == 2 && request.args[1].size() == 8, "GET takes a key and a timeout");
    case kAdd: return needs(n == 2 && request.args[1].size() == 8, "ADD takes a key and a number");
    case kCompareSet: return needs(n == 3, "COMPARE_SET takes a key, an expected and a desired value");
    case kCheck: return needs(n >= 1, "CHECK takes keys");
    case kWait: return needs(n >= 2 && request.args[0].size() == 8, "WAIT takes a timeout and keys");
    case kDelete: return needs(n == 1, "DELETE takes a key");
    case kNumKeys: return needs(n == 0, "NUM_KEYS takes nothing");
    default: return "unknown request code " + std::to_string(int(request.code));
  }
}

std::string pack_i64(int64_t value) { return std::string(reinterpret_cast<const char*>(&value), 8); }

std::optional<int64_t> unpack_i64(const std::string& bytes) {
  if (bytes.size() != 8) return std::nullopt;
  int64_t v;
  std::memcpy(&v, bytes.data(), 8);
  return v;
}

}  // namespace cohort::detail::store_wire
