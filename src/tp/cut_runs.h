// Where a rank's part of a tensor cut by tensor parallelism (parameter_cuts.h) lies in the whole
// tensor, both flattened row-major: the runs of elements contiguous in both. A checkpoint by
// parameter name stores the whole tensor's flat order; a rank reads and writes its part through them.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::tp::detail {

/// `count` elements from `local` in the part and from `whole` in the whole tensor.
struct CutRun {
  int64_t local = 0;
  int64_t whole = 0;
  int64_t count = 0;
};

/// The runs of elements [begin, end) of rank `rank`'s part of a tensor of shape `whole_shape` cut along
/// `dim` into `fused` equal parts, each split over `ranks` as torch.chunk splits (shard_range), in order;
/// runs contiguous in both are merged. Throws cohort::Error (kInvalidArgument) for a cut that does not
/// fit the shape or a range outside the part.
std::vector<CutRun> cut_runs(const std::vector<int64_t>& whole_shape, int64_t dim, int64_t fused, int ranks, int rank,
                             int64_t begin, int64_t end);

}  // namespace cohort::tp::detail
