// cohort::Error (its kind and ranks) and the process-wide rank identity that prefixes errors and logs.
#include <algorithm>
#include <atomic>

#include "cohort/error.h"

namespace cohort {
namespace detail {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_size{0};
}  // namespace

std::string rank_prefix() {
  const int rank = g_rank.load();
  if (rank < 0) return "";
  return "[rank " + std::to_string(rank) + "/" + std::to_string(g_size.load()) + "] ";
}

void set_rank_identity(int rank, int size) {
  g_size = size;
  g_rank = rank;
}

}  // namespace detail

Error::Error(const std::string& message)
    : std::runtime_error(message.rfind("[rank ", 0) == 0 ? message : detail::rank_prefix() + message) {}

Error::Error(const std::string& message, ErrorKind kind, std::vector<int> ranks) : Error(message) {
  kind_ = kind;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  ranks_ = std::move(ranks);
}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOther: return "other";
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kPeerDied: return "peer died";
    case ErrorKind::kAborted: return "aborted";
    case ErrorKind::kDesync: return "desync";
    case ErrorKind::kIO: return "I/O";
    case ErrorKind::kOutOfMemory: return "out of memory";
    case ErrorKind::kInternal: return "internal";
  }
  return "other";
}

}  // namespace cohort
