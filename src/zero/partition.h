// How the ZeRO engine lays trainable parameters out: groups of parameters flattened back to back,
// each padded to a multiple of the world size and cut into equal shards, rank r owning shard r.
// Stage 1/2 group by reduce_bucket_size (a group is the unit of one reduce-scatter); stage 3 groups
// by unit (the Sequential's children), the unit of one all-gather. A pure function of parameter
// sizes, so every rank computes the same layout, and the same groups at any world size (only the
// padding changes), which lets checkpoints load at another world size.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace cohort::detail {

struct GroupLayout {
  std::vector<int64_t> params;   ///< indices into the engine's trainable parameters, ascending
  std::vector<int64_t> offsets;  ///< element offset of each parameter in the group's flat tensor
  int64_t numel = 0;             ///< elements of the parameters, without padding
  int64_t padded = 0;            ///< numel rounded up to a multiple of the world size (at least one each)
  int64_t shard = 0;             ///< padded / world size

  /// [begin, end) of the flat tensor rank `rank` owns, padding included.
  std::pair<int64_t, int64_t> owned(int rank) const { return {rank * shard, (rank + 1) * shard}; }
  /// The same range clipped to real elements (may be empty for the last ranks).
  std::pair<int64_t, int64_t> owned_real(int rank) const;
};

/// Consecutive parameters into groups of at most `max_elements` elements (a larger parameter gets a
/// group of its own). Parameters with zero elements still belong to a group.
std::vector<GroupLayout> group_by_size(const std::vector<int64_t>& numels, int64_t max_elements, int world_size);

/// One group per distinct unit, in order of first appearance; unit_of[i] is parameter i's unit.
std::vector<GroupLayout> group_by_unit(const std::vector<int64_t>& numels, const std::vector<int64_t>& unit_of,
                                       int world_size);

}  // namespace cohort::detail
