// Pure checkpoint arithmetic (see layout.h).
#include "checkpoint/layout.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail::ckpt {

std::vector<int> assign_writers(const std::vector<int64_t>& bytes, int world_size) {
  COHORT_CHECK_KIND(kInternal, world_size >= 1, "assign_writers: world size ", world_size, " < 1");
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int64_t> load(world_size, 0);
  std::vector<int> writer(bytes.size(), 0);
  for (size_t index : order) {
    const int rank = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    writer[index] = rank;
    load[rank] += bytes[index];
  }
  return writer;
}

std::map<std::string, int> assign_owned_writers(const std::vector<HeldTensors>& per_rank) {
  std::map<std::string, std::pair<int64_t, std::vector<int>>> holders;  // name -> bytes, ranks
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& [name, bytes] : per_rank[r]) {
      auto& held = holders[name];
      COHORT_CHECK_KIND(kInvalidArgument, held.second.empty() || held.first == bytes, "ranks ", held.second.front(),
                        " and ", r, " hold tensor '", name, "' with ", held.first, " and ", bytes,
                        " bytes: a tensor several ranks hold (StateKind::kOwned, or one slice of a kSharded one) "
                        "must be the same on each");
      held.first = bytes;
      held.second.push_back(static_cast<int>(r));
    }
  }
  std::vector<const std::string*> order;
  for (const auto& item : holders) order.push_back(&item.first);
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string* a, const std::string* b) { return holders[*a].first > holders[*b].first; });
  std::vector<int64_t> load(per_rank.size(), 0);
  std::map<std::string, int> writer;
  for (const std::string* name : order) {
    const auto& [bytes, ranks] = holders[*name];
    int best = ranks.front();
    for (int r : ranks)
      if (load[r] < load[best]) best = r;
    writer[*name] = best;
    load[best] += bytes;
  }
  return writer;
}

std::vector<SliceCopy> plan_slice_copies(const std::vector<Slice>& saved, int64_t begin, int64_t end,
                                         const std::string& what) {
  std::vector<size_t> order(saved.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return saved[a].offset < saved[b].offset; });
  std::vector<SliceCopy> copies;
  int64_t covered = begin;  // everything in [begin, covered) is planned
  int64_t previous_end = 0;
  for (size_t index : order) {
    const Slice& slice = saved[index];
    if (slice.numel == 0) continue;
    COHORT_CHECK_KIND(kIO, slice.offset >= previous_end, what, ": saved slices overlap at element ", slice.offset);
    previous_end = slice.offset + slice.numel;
    const int64_t lo = std::max(begin, slice.offset), hi = std::min(end, previous_end);
    if (lo >= hi) continue;
    COHORT_CHECK_KIND(kIO, lo == covered, what, ": no saved slice holds elements [", covered, ", ", lo, ")");
    copies.push_back({index, lo - slice.offset, lo - begin, hi - lo});
    covered = hi;
  }
  COHORT_CHECK_KIND(kIO, covered >= end, what, ": no saved slice holds elements [", covered, ", ", end, ")");
  return copies;
}

std::string step_dir_name(int64_t step) { return "step-" + std::to_string(step); }

std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string old_copy_name(const std::string& step_dir) { return "." + step_dir + ".old"; }

std::optional<int64_t> parse_old_copy(const std::string& name) {
  if (name.size() < 6 || name[0] != '.' || name.compare(name.size() - 4, 4, ".old") != 0) return std::nullopt;
  return parse_step_dir(name.substr(1, name.size() - 5));
}

std::string shard_file_name(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.bin", rank, world_size);
  return name;
}

RetentionPlan plan_retention(std::vector<int64_t> steps, int64_t saved, int keep_last) {
  std::sort(steps.rbegin(), steps.rend());  // newest first
  RetentionPlan plan;
  int kept = 0;
  for (int64_t step : steps) {
    if (step > saved) {
      plan.newer.push_back(step);
    } else if (keep_last <= 0 || kept < keep_last) {
      ++kept;
    } else {
      plan.remove.push_back(step);
    }
  }
  return plan;
}

}  // namespace cohort::detail::ckpt
