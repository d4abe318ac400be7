// The response cache and a round's pure pieces (see response_cache.h).
#include "horovod/response_cache.h"

#include <set>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::hvd::detail {

std::optional<size_t> ResponseCache::bit(const std::string& name) const {
  const auto it = bits_.find(name);
  if (it == bits_.end()) return std::nullopt;
  return it->second;
}

void ResponseCache::add(const std::string& name) {
  if (names_.size() >= capacity_ || bits_.count(name)) return;
  bits_[name] = names_.size();
  names_.push_back(name);
}

std::vector<std::string> agreed_names(const std::vector<std::vector<std::string>>& ready_per_rank) {
  if (ready_per_rank.empty()) return {};
  std::vector<std::set<std::string>> sets;
  for (const auto& ready : ready_per_rank) sets.emplace_back(ready.begin(), ready.end());
  std::vector<std::string> agreed;
  for (const auto& name : ready_per_rank[0]) {
    bool everywhere = true;
    for (const auto& set : sets) everywhere = everywhere && set.count(name) > 0;
    if (everywhere) agreed.push_back(name);
  }
  return agreed;
}

std::vector<uint8_t> encode_names(const std::vector<std::string>& names) {
  std::vector<uint8_t> bytes;
  for (const auto& name : names) {
    const std::string head = std::to_string(name.size()) + ":";
    bytes.insert(bytes.end(), head.begin(), head.end());
    bytes.insert(bytes.end(), name.begin(), name.end());
  }
  return bytes;
}

std::vector<std::string> decode_names(const uint8_t* data, size_t size) {
  std::vector<std::string> names;
  size_t at = 0;
  while (at < size) {
    size_t length = 0, digits = 0;
    while (at < size && data[at] >= '0' && data[at] <= '9') length = length * 10 + (data[at++] - '0'), ++digits;
    COHORT_CHECK_KIND(kInternal, digits > 0 && at < size && data[at] == ':' && size - at - 1 >= length,
                      "hvd negotiation: a malformed name list at byte ", at, " of ", size);
    ++at;
    names.emplace_back(reinterpret_cast<const char*>(data + at), length);
    at += length;
  }
  return names;
}

}  // namespace cohort::hvd::detail
