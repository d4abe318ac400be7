// Horovod's response cache and the pure pieces of a negotiation round (see controller.h, note
// "negotiation"). The cache gives each name that every rank agreed on once a bit, the same on every
// rank (names enter in the agreed order, so no rank needs to tell another which bit is which); a
// steady loop then negotiates with one small allreduce of bits instead of exchanging names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::hvd::detail {

class ResponseCache {
 public:
  /// At most `capacity` names (HOROVOD_CACHE_CAPACITY); a full cache keeps its names and negotiates
  /// new ones in full. 0 turns the cache off.
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  /// The name's bit, when it is cached.
  std::optional<size_t> bit(const std::string& name) const;
  /// Caches `name` under the next bit unless it is cached already or the cache is full.
  void add(const std::string& name);
  const std::string& name(size_t bit) const { return names_.at(bit); }
  size_t size() const { return names_.size(); }

 private:
  size_t capacity_;
  std::vector<std::string> names_;
  std::map<std::string, size_t> bits_;
};

/// The names every rank has ready, given each rank's ready names in its submission order: in rank 0's
/// order, so every rank starts them alike.
std::vector<std::string> agreed_names(const std::vector<std::vector<std::string>>& ready_per_rank);

/// Names to bytes and back ("<length>:<name>" each), for the full exchange of a round.
std::vector<uint8_t> encode_names(const std::vector<std::string>& names);
std::vector<std::string> decode_names(const uint8_t* data, size_t size);

}  // namespace cohort::hvd::detail
