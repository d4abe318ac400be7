// Group layout of the ZeRO engine (see partition.h).
#include "zero/partition.h"

#include <algorithm>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail {
namespace {

void seal(GroupLayout& group, int world_size) {
  // Never an empty shard: a group of zero elements still has one padding element per rank, so
  // every rank runs the same collectives with non-empty tensors.
  const int64_t n = world_size;
  group.padded = std::max<int64_t>(n, (group.numel + n - 1) / n * n);
  group.shard = group.padded / n;
}

void append(GroupLayout& group, int64_t index, int64_t numel) {
  group.params.push_back(index);
  group.offsets.push_back(group.numel);
  group.numel += numel;
}

}  // namespace

std::pair<int64_t, int64_t> GroupLayout::owned_real(int rank) const {
  auto [begin, end] = owned(rank);
  return {std::min(begin, numel), std::min(end, numel)};
}

std::vector<GroupLayout> group_by_size(const std::vector<int64_t>& numels, int64_t max_elements, int world_size) {
  COHORT_CHECK_KIND(kInternal, world_size >= 1, "ZeRO partition: world size must be >= 1, got ", world_size);
  COHORT_CHECK_KIND(kInvalidArgument, max_elements >= 1, "ZeRO partition: reduce_bucket_size must be >= 1, got ",
                    max_elements);
  std::vector<GroupLayout> groups;
  for (size_t i = 0; i < numels.size(); ++i) {
    if (groups.empty() || (groups.back().numel > 0 && groups.back().numel + numels[i] > max_elements))
      groups.emplace_back();
    append(groups.back(), int64_t(i), numels[i]);
  }
  for (auto& group : groups) seal(group, world_size);
  return groups;
}

std::vector<GroupLayout> group_by_unit(const std::vector<int64_t>& numels, const std::vector<int64_t>& unit_of,
                                       int world_size) {
  COHORT_CHECK_KIND(kInternal, world_size >= 1, "ZeRO partition: world size must be >= 1, got ", world_size);
  COHORT_CHECK_KIND(kInternal, numels.size() == unit_of.size(), "ZeRO partition: ", numels.size(), " parameters but ",
                    unit_of.size(), " unit labels");
  std::vector<GroupLayout> groups;
  std::vector<int64_t> units;  // unit label of each group
  for (size_t i = 0; i < numels.size(); ++i) {
    auto found = std::find(units.begin(), units.end(), unit_of[i]);
    size_t g = size_t(found - units.begin());
    if (found == units.end()) {
      units.push_back(unit_of[i]);
      groups.emplace_back();
    }
    append(groups[g], int64_t(i), numels[i]);
  }
  for (auto& group : groups) seal(group, world_size);
  return groups;
}

}  // namespace cohort::detail
