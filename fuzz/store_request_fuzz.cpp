// Fuzz target: the parser of cohort's rendezvous store (src/world/store_wire.h), which reads what any
// process that reaches rank 0's port sends, before and after it proves the job's secret. The input is
// a byte stream cut into frames as the server cuts it (the handshake limit first, then the full one):
// no crash, no read past the input, no allocation beyond a frame's declared and bounded size, and every
// parsed frame encodes back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "world/store_wire.h"

namespace wire = cohort::detail::store_wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  bool proven = false;
  while (at < size) {
    const size_t limit = proven ? wire::kFrameLimit : wire::kHandshakeLimit;
    const auto cut = wire::cut_frame(data + at, size - at, limit);
    if (cut.status != wire::FrameCut::kReady) break;  // too large: refused; need more: waits
    const uint8_t* body = data + at + wire::kHeaderBytes;
    const auto message = wire::parse_body(body, cut.body_bytes);
    if (message) {
      const std::string again = wire::encode(*message);
      if (again.size() != wire::kHeaderBytes + cut.body_bytes ||
          std::memcmp(again.data(), data + at, again.size()) != 0)
        std::abort();  // the parser accepted bytes it does not round-trip
      if (message->code == wire::kAuth) proven = true;
      if (proven && wire::request_problem(*message).empty()) {
        for (const auto& arg : message->args) (void)wire::unpack_i64(arg);
      }
    }
    at += wire::kHeaderBytes + cut.body_bytes;
  }
  return 0;
}
