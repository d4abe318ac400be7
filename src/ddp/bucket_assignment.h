// Which gradients share a bucket: a pure function of the parameters' sizes, dtype/device groups and
// the order gradients are expected to arrive, so it is tested alone and, given the same inputs,
// identical on every rank (see the note "bucket order" in reducer.h).
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::detail {

struct BucketLimits {
  int64_t first_bucket_bytes = 1 << 20;  // the first bucket of each group closes early to start early
  int64_t bucket_bytes = 25 << 20;
};

/// Assigns parameters (indices into `bytes`/`group`), visited in `arrival_order`, to buckets: one open
/// bucket per group; a bucket closes once it holds at least its limit. Buckets are returned in the
/// order of their first parameter in `arrival_order`, which is the order they become ready and are
/// launched. Every index of `arrival_order` lands in exactly one bucket.
std::vector<std::vector<int64_t>> assign_buckets(const std::vector<int64_t>& arrival_order,
                                                 const std::vector<int64_t>& bytes, const std::vector<int64_t>& group,
                                                 const BucketLimits& limits);

}  // namespace cohort::detail
