// Placement and shard_range (cohort/dtensor.h).
#include <algorithm>

#include "cohort/dtensor.h"
#include "core/check.h"

namespace cohort {

Placement Placement::shard(int64_t dim) { return Placement(Kind::kShard, dim); }
Placement Placement::replicate() { return Placement(Kind::kReplicate, 0); }
Placement Placement::partial() { return Placement(Kind::kPartial, 0); }

std::string Placement::str() const {
  switch (kind_) {
    case Kind::kShard: return "Shard(" + std::to_string(dim_) + ")";
    case Kind::kReplicate: return "Replicate()";
    case Kind::kPartial: return "Partial(sum)";
  }
  return "?";
}

std::pair<int64_t, int64_t> shard_range(int64_t size, int ranks, int rank) {
  COHORT_CHECK_KIND(kInvalidArgument, size >= 0 && ranks > 0 && rank >= 0 && rank < ranks, "shard_range(", size, ", ",
                    ranks, ", ", rank, "): a size of 0 or more over ranks > 0, and a rank among them");
  const int64_t chunk = (size + ranks - 1) / ranks;  // torch.chunk's
  const int64_t first = std::min(size, chunk * rank);
  return {first, std::min(size, first + chunk) - first};
}

}  // namespace cohort
