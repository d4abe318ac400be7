// check_chunks (metadata_chunks.h). Overlaps are found by a sweep along the dimension whose chunks start
// at the most distinct offsets (the sharded one: dim 0 for FSDP, dim 1 for a column split), so a real
// layout compares each chunk with the few that share its span; a hostile one that would need more than
// kMaxComparisons comparisons is refused rather than checked for minutes.
#include "checkpoint/dcp/metadata_chunks.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::dcp {

namespace {
// A name of its own: the checkpoint layer compiles in unity batches, which share anonymous namespaces.
namespace chunk_checks {

constexpr int64_t kMaxComparisons = int64_t(1) << 26;

[[noreturn]] void fail(const std::string& path, const DcpEntry& e, const std::string& message) {
  throw Error(str(path, ": tensor '", excerpt(e.fqn), "' ", message), ErrorKind::kIO);
}

std::string chunk_text(const DcpEntry& e, size_t i) {
  return str(i, " (offsets ", shape_text(e.chunks[i].offsets), ", sizes ", shape_text(e.chunks[i].sizes), ")");
}

void check_size(const DcpEntry& e, const std::string& path) {
  int64_t numel = 1;
  for (int64_t n : e.size) {
    if (n < 0) fail(path, e, str("has size ", shape_text(e.size), ": a size is negative"));
    if (n != 0 && numel > INT64_MAX / n) fail(path, e, str("has size ", shape_text(e.size), ": too many elements"));
    numel *= n;
  }
}

// A chunk inside the tensor: offset + size <= the tensor's size in every dimension, without overflow.
void check_inside(const DcpEntry& e, size_t i, const std::string& path) {
  const DcpChunk& c = e.chunks[i];
  if (c.offsets.size() != e.size.size() || c.sizes.size() != e.size.size())
    fail(path, e, str("chunk ", chunk_text(e, i), " does not have the rank of its size ", shape_text(e.size)));
  for (size_t d = 0; d < e.size.size(); ++d) {
    if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.sizes[d] > e.size[d] || c.offsets[d] > e.size[d] - c.sizes[d])
      fail(path, e, str("chunk ", chunk_text(e, i), " lies outside its size ", shape_text(e.size)));
  }
}

bool has_elements(const DcpChunk& c) {
  return std::all_of(c.sizes.begin(), c.sizes.end(), [](int64_t n) { return n > 0; });
}

bool meet(const DcpChunk& a, const DcpChunk& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] + a.sizes[d] <= b.offsets[d] || b.offsets[d] + b.sizes[d] <= a.offsets[d]) return false;
  }
  return true;
}

// The dimension along which the chunks start at the most distinct offsets.
size_t sweep_dimension(const DcpEntry& e, const std::vector<size_t>& order) {
  size_t best = 0, best_count = 0;
  for (size_t d = 0; d < e.size.size(); ++d) {
    std::vector<int64_t> starts;
    for (size_t i : order) starts.push_back(e.chunks[i].offsets[d]);
    std::sort(starts.begin(), starts.end());
    const size_t count = size_t(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (count > best_count) best = d, best_count = count;
  }
  return best;
}

void check_apart(const DcpEntry& e, const std::string& path) {
  std::vector<size_t> order;
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    if (has_elements(e.chunks[i])) order.push_back(i);
  }
  auto overlap = [&](size_t a, size_t b) {
    fail(path, e,
         str("has chunks ", chunk_text(e, std::min(a, b)), " and ", chunk_text(e, std::max(a, b)), " that overlap"));
  };
  if (e.size.empty()) {  // a 0-d tensor: its one element in each chunk
    if (order.size() > 1) overlap(order[0], order[1]);
    return;
  }
  const size_t d = sweep_dimension(e, order);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return e.chunks[a].offsets[d] < e.chunks[b].offsets[d]; });
  std::vector<size_t> active;  // chunks that start before the current one and may reach into it along d
  int64_t comparisons = 0;
  for (size_t i : order) {
    const DcpChunk& c = e.chunks[i];
    comparisons += int64_t(active.size());
    if (comparisons > kMaxComparisons)
      fail(path, e,
           str("has ", e.chunks.size(), " chunks laid out so that checking them for overlaps takes more than ",
               kMaxComparisons, " comparisons"));
    active.erase(
        std::remove_if(active.begin(), active.end(),
                       [&](size_t j) { return e.chunks[j].offsets[d] + e.chunks[j].sizes[d] <= c.offsets[d]; }),
        active.end());
    for (size_t j : active) {
      if (meet(e.chunks[j], c)) overlap(j, i);
    }
    active.push_back(i);
  }
}

}  // namespace chunk_checks
}  // namespace

void check_chunks(const DcpEntry& tensor, const std::string& path) {
  chunk_checks::check_size(tensor, path);
  for (size_t i = 0; i < tensor.chunks.size(); ++i) chunk_checks::check_inside(tensor, i, path);
  chunk_checks::check_apart(tensor, path);
}

}  // namespace cohort::detail::dcp
