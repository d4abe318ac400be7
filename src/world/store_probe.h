// Reading one key from a TCPStore that may not be ours, and may vanish while we read.
//
// The rendezvous asks a store whose it is before this rank joins it (job_identity.h): the store at
// MASTER_ADDR:MASTER_PORT can be another job's whose rank 0 is ending. LibTorch 1.13's TCPStore client
// cannot be used for that: every client starts a callback thread whose connection, when the listener
// closes before accepting it, is reset, and that thread then throws out of its loop and aborts the
// whole process ("terminate called after throwing an instance of 'std::system_error' ... Connection
// reset by peer"). On 1.13 the key is therefore read over a plain socket in the store's own wire
// format; LibTorch 2.x clients have no such thread and are used directly (on a thread of their own,
// because their handshake with a listener that never answers has no timeout).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace cohort::detail {

/// A key's value, or why there is none.
struct StoreKeyRead {
  std::optional<std::vector<uint8_t>> value;
  std::string failure;  // "" when `value` is set
};

/// Waits up to `timeout` for `key` to exist in the TCPStore listening at host:port and returns its
/// value. Never throws and never takes the process down: a refused connection, a closed or reset
/// one, a listener that is no store and a key that never appears all come back as `failure`.
StoreKeyRead read_store_key(const std::string& host, int port, const std::string& key,
                            std::chrono::milliseconds timeout);

}  // namespace cohort::detail
