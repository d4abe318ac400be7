// Bucket assignment (see bucket_assignment.h).
#include "ddp/bucket_assignment.h"

#include <algorithm>
#include <map>

namespace cohort::detail {

std::vector<std::vector<int64_t>> assign_buckets(const std::vector<int64_t>& arrival_order,
                                                 const std::vector<int64_t>& bytes, const std::vector<int64_t>& group,
                                                 const BucketLimits& limits) {
  struct Open {
    std::vector<int64_t> params;
    int64_t bytes = 0;
    int closed_count = 0;  // buckets this group already closed: only the first uses first_bucket_bytes
  };
  std::map<int64_t, Open> open;
  std::vector<std::vector<int64_t>> buckets;
  for (int64_t p : arrival_order) {
    Open& bucket = open[group[p]];
    bucket.params.push_back(p);
    bucket.bytes += bytes[p];
    const int64_t limit = bucket.closed_count == 0 ? limits.first_bucket_bytes : limits.bucket_bytes;
    if (bucket.bytes >= limit) {
      buckets.push_back(std::move(bucket.params));
      bucket.params.clear();
      bucket.bytes = 0;
      ++bucket.closed_count;
    }
  }
  for (auto& [key, bucket] : open)
    if (!bucket.params.empty()) buckets.push_back(std::move(bucket.params));
  // Launch order: by the position of each bucket's first parameter in the arrival order.
  std::vector<int64_t> position(bytes.size(), 0);
  for (size_t i = 0; i < arrival_order.size(); ++i) position[arrival_order[i]] = int64_t(i);
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const auto& a, const auto& b) { return position[a.front()] < position[b.front()]; });
  return buckets;
}

}  // namespace cohort::detail
