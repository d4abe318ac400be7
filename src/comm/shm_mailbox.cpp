// Point-to-point messages through the shared-memory rings (see shm_mailbox.h for the protocol).
#include "comm/shm_mailbox.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>

#include "cohort/error.h"

namespace cohort::detail {
namespace {

// Ahead of every message in a ring: this, then `dims` int64 sizes of the sender's shape, then `n` bytes
// of data.
struct WireHeader {
  uint32_t magic;
  uint32_t dims;
  uint64_t tag, seq, hash, n;
  int32_t dtype;
  uint32_t unused;
};
constexpr uint32_t kWireMagic = 0xc0405e9e;
// A shape with more dimensions is cut here (it only serves mismatch messages): an envelope always fits
// the smallest ring whole, so the receiver reads it in one piece.
constexpr size_t kMaxDims = 64;

size_t dims_sent(const ShmMailbox::Envelope& envelope) { return std::min(envelope.shape.size(), kMaxDims); }
size_t envelope_bytes(const ShmMailbox::Envelope& envelope) {
  return sizeof(WireHeader) + dims_sent(envelope) * sizeof(int64_t);
}

}  // namespace

struct ShmMailbox::Outbox {
  explicit Outbox(void* memory, size_t capacity) : ring(memory, capacity) {}
  ShmRing ring;
  std::mutex mutex;
  std::condition_variable turn;
  uint64_t next_ticket = 0;  // tickets given to sends that could not be written at once
  uint64_t serving = 0;      // the ticket whose message may be written now
};

struct ShmMailbox::Incoming {
  std::pair<uint64_t, uint64_t> key;  // (tag, seq)
  size_t remaining = 0, offset = 0;
  char* to = nullptr;         // where the bytes go; null: dropped
  Receive* posted = nullptr;  // the receive they go to, if one was posted
  bool dropped = false;       // its receive gave up: the bytes go nowhere
};

struct ShmMailbox::Inbox {
  explicit Inbox(void* memory, size_t capacity) : ring(memory, capacity) {}
  struct SetAside {
    Envelope envelope;
    std::vector<char> bytes;
    bool complete = false;
  };
  ShmRing ring;
  std::mutex mutex;
  std::optional<Incoming> current;  // the message whose bytes are arriving
  std::map<std::pair<uint64_t, uint64_t>, SetAside> set_aside;
  std::map<std::pair<uint64_t, uint64_t>, Receive*> posted;
};

ShmMailbox::ShmMailbox(const ShmTransport& shm) {
  outboxes_.resize(size_t(shm.size()));
  inboxes_.resize(size_t(shm.size()));
  for (int peer = 0; peer < shm.size(); ++peer) {
    if (peer == shm.rank()) continue;
    outboxes_[peer] = std::make_unique<Outbox>(shm.ring_memory(shm.rank(), peer), shm.ring_capacity());
    inboxes_[peer] = std::make_unique<Inbox>(shm.ring_memory(peer, shm.rank()), shm.ring_capacity());
  }
}

ShmMailbox::~ShmMailbox() = default;

void ShmMailbox::write_envelope(Outbox& outbox, const Envelope& envelope, size_t n) {
  const size_t dims = dims_sent(envelope);
  const WireHeader header{kWireMagic,    uint32_t(dims), envelope.tag,   envelope.seq,
                          envelope.hash, uint64_t(n),    envelope.dtype, 0};
  outbox.ring.write(&header, sizeof header);
  outbox.ring.write(envelope.shape.data(), dims * sizeof(int64_t));
}

bool ShmMailbox::try_send(int peer, const Envelope& envelope, const void* bytes, size_t n, uint64_t& ticket) {
  Outbox& outbox = *outboxes_.at(size_t(peer));
  std::lock_guard<std::mutex> lock(outbox.mutex);
  const size_t total = envelope_bytes(envelope) + n;
  if (outbox.next_ticket == outbox.serving && outbox.ring.writable() >= total) {
    write_envelope(outbox, envelope, n);
    outbox.ring.write(bytes, n);
    outbox.ring.publish();
    ++sent_;
    return true;
  }
  ticket = outbox.next_ticket++;
  return false;
}

void ShmMailbox::finish_send(int peer, uint64_t ticket, const Envelope& envelope, const void* bytes, size_t n,
                             const ShmWatch& watch) {
  Outbox& outbox = *outboxes_.at(size_t(peer));
  {
    std::unique_lock<std::mutex> lock(outbox.mutex);
    while (!outbox.turn.wait_for(lock, std::chrono::milliseconds(10), [&] { return outbox.serving == ticket; })) {
      lock.unlock();
      watch();
      lock.lock();
    }
  }
  // This ticket is served: no other thread writes to the ring until it passes the turn on.
  ShmRing& ring = outbox.ring;
  ring.wait_writable(envelope_bytes(envelope), watch);
  write_envelope(outbox, envelope, n);
  ring.publish();
  // Pieces of a quarter ring: the receiver copies one out while the next is copied in.
  const size_t quarter = ring.capacity() / 4;
  const char* from = static_cast<const char*>(bytes);
  for (size_t done = 0; done < n;) {
    if (ring.writable() == 0) ring.wait_writable(std::min(n - done, quarter), watch);
    const size_t piece = std::min({ring.writable(), n - done, quarter});
    ring.write(from + done, piece);
    ring.publish();
    done += piece;
  }
  ++sent_;
  std::lock_guard<std::mutex> lock(outbox.mutex);
  ++outbox.serving;
  outbox.turn.notify_all();
}

void ShmMailbox::start_incoming(Inbox& inbox) {
  WireHeader header;
  inbox.ring.read(&header, sizeof header);
  const size_t n = size_t(header.n);
  const auto key = std::make_pair(header.tag, header.seq);
  // The sender's shape is only read when a message could still turn out mismatched: a posted receive
  // whose hash and size agree skips it (no allocation per message).
  auto read_envelope = [&] {
    Envelope envelope{header.tag, header.seq, header.hash, header.dtype, std::vector<int64_t>(header.dims)};
    inbox.ring.read(envelope.shape.data(), envelope.shape.size() * sizeof(int64_t));
    return envelope;
  };
  Incoming incoming{key, n, 0, nullptr, nullptr};
  auto posted = inbox.posted.find(key);
  if (posted != inbox.posted.end()) {
    Receive& receive = *posted->second;
    receive.envelope_seen = true;
    incoming.posted = &receive;
    if (header.hash == receive.hash && n == receive.n) {
      inbox.ring.read(nullptr, size_t(header.dims) * sizeof(int64_t));
      incoming.to = static_cast<char*>(receive.destination);
    } else {
      receive.mismatch = read_envelope();  // its bytes are dropped
    }
  } else {
    auto& aside = inbox.set_aside[key];
    aside.envelope = read_envelope();
    aside.bytes.resize(n);
    incoming.to = aside.bytes.data();
  }
  inbox.current = incoming;
}

void ShmMailbox::progress(Inbox& inbox) {
  ShmRing& ring = inbox.ring;
  for (;;) {
    if (!inbox.current) {
      WireHeader header;
      if (ring.readable() < sizeof header) break;
      ring.peek(&header, sizeof header);
      if (header.magic != kWireMagic)
        throw Error("the shared-memory message stream is corrupt (a bad envelope)", ErrorKind::kInternal);
      if (ring.readable() < sizeof header + size_t(header.dims) * sizeof(int64_t)) break;
      start_incoming(inbox);
    }
    Incoming& incoming = *inbox.current;
    const size_t n = std::min({ring.readable(), incoming.remaining, ring.capacity() / 4});
    ring.read(incoming.to ? incoming.to + incoming.offset : nullptr, n);
    ring.release();  // the sender may write the next piece while this one is used
    incoming.offset += n;
    incoming.remaining -= n;
    if (incoming.remaining > 0) {
      if (n == 0) break;
      continue;
    }
    if (incoming.posted) {
      incoming.posted->done = true;
      ++received_;
    } else if (!incoming.dropped) inbox.set_aside[incoming.key].complete = true;
    inbox.current.reset();
  }
  ring.release();
}

bool ShmMailbox::take_set_aside(Inbox& inbox, Receive& receive) {
  auto it = inbox.set_aside.find({receive.tag, receive.seq});
  if (it == inbox.set_aside.end()) return false;
  receive.envelope_seen = true;
  if (!it->second.complete) return false;
  const Envelope& envelope = it->second.envelope;
  if (envelope.hash != receive.hash || it->second.bytes.size() != receive.n) receive.mismatch = envelope;
  else if (receive.n > 0) std::memcpy(receive.destination, it->second.bytes.data(), receive.n);
  inbox.set_aside.erase(it);
  receive.done = true;
  ++received_;
  return true;
}

bool ShmMailbox::try_receive(int peer, Receive& receive) {
  Inbox& inbox = *inboxes_.at(size_t(peer));
  std::lock_guard<std::mutex> lock(inbox.mutex);
  if (take_set_aside(inbox, receive)) return true;
  progress(inbox);
  return take_set_aside(inbox, receive);
}

void ShmMailbox::receive(int peer, Receive& receive, const ShmWatch& watch) {
  Inbox& inbox = *inboxes_.at(size_t(peer));
  std::unique_lock<std::mutex> lock(inbox.mutex);
  if (take_set_aside(inbox, receive)) return;
  const auto key = std::make_pair(receive.tag, receive.seq);
  inbox.posted[key] = &receive;
  // However this ends (done, or the watch threw), the receive leaves the posted ones, and bytes still
  // on their way to it are dropped instead of written into a tensor its caller may have freed.
  struct Unpost {
    Inbox& inbox;
    Receive& receive;
    std::pair<uint64_t, uint64_t> key;
    ~Unpost() {
      inbox.posted.erase(key);
      if (inbox.current && inbox.current->posted == &receive) {
        inbox.current->posted = nullptr;
        inbox.current->to = nullptr;
        inbox.current->dropped = true;
      }
    }
  } unpost{inbox, receive, key};
  for (;;) {
    progress(inbox);
    if (receive.done || take_set_aside(inbox, receive)) return;
    // Waits for bytes beyond those taken, not beyond those published: a sender that filled the ring
    // after progress() looked waits for room, and would wait forever for a reader waiting for more.
    const uint64_t seen = inbox.ring.consumed();
    lock.unlock();
    try {
      inbox.ring.wait_published(seen, watch);
    } catch (...) {
      lock.lock();  // Unpost runs under the lock
      throw;
    }
    lock.lock();
  }
}

}  // namespace cohort::detail
