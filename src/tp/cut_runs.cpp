// cut_runs (see cut_runs.h). The whole tensor is viewed as [outer, fused, P, inner] (P the size of one
// fused part along the cut dimension) and a rank's part as [outer, fused, c, inner], c its chunk of P:
// each (outer, fused) block of c * inner elements is contiguous in both.
#include "tp/cut_runs.h"

#include "cohort/dtensor.h"
#include "core/check.h"

namespace cohort::tp::detail {

std::vector<CutRun> cut_runs(const std::vector<int64_t>& whole_shape, int64_t dim, int64_t fused, int ranks, int rank,
                             int64_t begin, int64_t end) {
  const auto ndim = static_cast<int64_t>(whole_shape.size());
  COHORT_CHECK_KIND(kInvalidArgument, dim >= 0 && dim < ndim && fused > 0 && whole_shape[size_t(dim)] % fused == 0,
                    "cut_runs: a cut along dimension ", dim, " into ", fused,
                    " fused part(s) does not fit a tensor of ", ndim, " dimension(s)",
                    dim >= 0 && dim < ndim ? " of size " + std::to_string(whole_shape[size_t(dim)]) : "");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= whole_shape[size_t(d)];
  for (int64_t d = dim + 1; d < ndim; ++d) inner *= whole_shape[size_t(d)];
  const int64_t part = whole_shape[size_t(dim)] / fused;
  const auto [start, chunk] = shard_range(part, ranks, rank);
  const int64_t block = chunk * inner, blocks = outer * fused;
  COHORT_CHECK_KIND(kInvalidArgument, begin >= 0 && begin <= end && end <= block * blocks, "cut_runs: elements [",
                    begin, ", ", end, ") are not in rank ", rank, "'s part of ", block * blocks, " element(s)");
  std::vector<CutRun> out;
  if (begin == end) return out;
  for (int64_t q = begin / block; q < blocks && q * block < end; ++q) {
    const int64_t lo = std::max(begin, q * block), hi = std::min(end, (q + 1) * block);
    const int64_t whole = (q * part + start) * inner + (lo - q * block);
    if (!out.empty() && out.back().local + out.back().count == lo && out.back().whole + out.back().count == whole) {
      out.back().count += hi - lo;
    } else {
      out.push_back({lo, whole, hi - lo});
    }
  }
  return out;
}

}  // namespace cohort::tp::detail
