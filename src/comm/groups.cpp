// Process groups: Comm::split (MPI_Comm_split) and Comm::new_group (torch.distributed.new_group).
// Creation is a collective of the parent: every rank's choice travels in one agreed allgather, so each
// rank computes the same membership, and each group gets a store prefix every member derives alike
// (parent's prefix / creation number / color). The group is then a full CommImpl of its own: its own
// control-plane mesh, Gloo (and NCCL) process group and shared-memory segment. See
// docs/design/process-groups.md for why groups do not share the parent's control plane.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <sstream>

#include "cohort/comm.h"
#include "comm/comm_impl.h"
#include "core/check.h"

namespace cohort {
namespace {

std::string list_of(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

// A group name: the caller's, else "group N" / "group N.color", nested under the parent's name.
std::string name_of(const detail::CommImpl& parent, const GroupOptions& options, const std::string& fallback) {
  if (!options.name().empty()) return options.name();
  const auto& parent_name = parent.config().group_name;
  return parent_name.empty() ? fallback : parent_name + "/" + fallback;
}

// Builds this rank's Comm for `members` (ranks of the parent, in group order); null if not a member.
std::shared_ptr<Comm> make_group(const detail::CommImpl& parent, const std::vector<int>& members,
                                 const std::string& store_prefix, const std::string& name,
                                 std::chrono::milliseconds timeout) {
  const auto me = std::find(members.begin(), members.end(), parent.rank());
  if (me == members.end()) return nullptr;
  detail::CommConfig config = parent.config();
  config.rank = int(me - members.begin());
  config.size = int(members.size());
  config.group_name = name;
  config.world_ranks.clear();
  for (int member : members) config.world_ranks.push_back(parent.world_rank(member));
  if (timeout.count() > 0) config.timeout = timeout;
  if (config.size > 1) config.store = c10::make_intrusive<c10d::PrefixStore>(store_prefix, parent.store_ptr());
  else config.store.reset();  // a group of one opens nothing: every collective is local
  return std::make_shared<Comm>(std::make_unique<detail::CommImpl>(config));
}

}  // namespace

const std::string& Comm::name() const { return impl_->config().group_name; }

int Comm::world_rank(int group_rank) const {
  COHORT_CHECK_KIND(kInvalidArgument, group_rank >= 0 && group_rank < size(), "world_rank: ", group_rank,
                    " is not a rank of this group of ", size());
  return impl_->world_rank(group_rank);
}

std::shared_ptr<Comm> Comm::split(int color, int key, const GroupOptions& options) {
  // One agreed collective carries every rank's (color, key): a rank that calls anything else here is
  // a desync, named like any other.
  torch::Tensor all = allgather(torch::tensor({int64_t(color), int64_t(key)}, torch::kLong));
  const int64_t id = impl_->next_group_id();
  if (color < 0) return nullptr;
  std::vector<std::tuple<int64_t, int>> order;  // (key, rank here) of the ranks with my color
  for (int r = 0; r < size(); ++r)
    if (all[r][0].item<int64_t>() == color) order.emplace_back(all[r][1].item<int64_t>(), r);
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  for (const auto& entry : order) members.push_back(std::get<1>(entry));
  const std::string tag = std::to_string(id) + "." + std::to_string(color);
  return make_group(*impl_, members, "cohort-group/" + tag, name_of(*impl_, options, "group " + tag),
                    options.timeout());
}

std::shared_ptr<Comm> Comm::new_group(const std::vector<int>& ranks, const GroupOptions& options) {
  std::vector<int64_t> mine(ranks.begin(), ranks.end());
  std::sort(mine.begin(), mine.end());
  for (size_t i = 0; i < mine.size(); ++i) {
    COHORT_CHECK_KIND(kInvalidArgument, mine[i] >= 0 && mine[i] < size(), "new_group: rank ", mine[i], " in ",
                      list_of(mine), " is not a rank of this Comm of ", size(), " (accepted: 0..", size() - 1, ")");
    COHORT_CHECK_KIND(kInvalidArgument, i == 0 || mine[i] != mine[i - 1], "new_group: rank ", mine[i],
                      " is listed twice in ", list_of(mine));
  }
  COHORT_CHECK_KIND(kInvalidArgument, !mine.empty(), "new_group: the list of ranks is empty");
  // Every rank's list, so a disagreement is named on every rank with what each rank passed.
  torch::Tensor lists = allgather_v(torch::tensor(mine, torch::kLong));
  torch::Tensor counts = allgather(torch::tensor({int64_t(mine.size())}, torch::kLong));
  const int64_t id = impl_->next_group_id();
  // Each distinct list with the ranks that passed it, in rank order: the same text on every rank.
  std::vector<std::pair<std::vector<int64_t>, std::vector<int>>> lists_by_rank;
  int64_t offset = 0;
  for (int r = 0; r < size(); ++r) {
    const int64_t n = counts[r][0].item<int64_t>();
    auto slice = lists.narrow(0, offset, n).contiguous();
    offset += n;
    std::vector<int64_t> theirs(slice.data_ptr<int64_t>(), slice.data_ptr<int64_t>() + n);
    auto same = std::find_if(lists_by_rank.begin(), lists_by_rank.end(),
                             [&](const auto& entry) { return entry.first == theirs; });
    if (same == lists_by_rank.end()) lists_by_rank.push_back({theirs, {r}});
    else same->second.push_back(r);
  }
  if (lists_by_rank.size() > 1) {
    std::ostringstream out;
    std::vector<int> differing;  // world ranks whose list is not this rank's
    for (size_t i = 0; i < lists_by_rank.size(); ++i) {
      out << (i ? "; " : "") << impl_->ranks_label(lists_by_rank[i].second)
          << (lists_by_rank[i].second.size() > 1 ? " list " : " lists ") << list_of(lists_by_rank[i].first);
      if (lists_by_rank[i].first != mine) {
        for (int r : lists_by_rank[i].second) differing.push_back(impl_->world_rank(r));
      }
    }
    throw Error(detail::str("new_group #", id, impl_->where(), ": ranks disagree on the members: ", out.str(),
                            ". Every rank must call new_group with the same list"),
                ErrorKind::kDesync, differing);
  }
  std::vector<int> members(mine.begin(), mine.end());
  return make_group(*impl_, members, "cohort-group/" + std::to_string(id),
                    name_of(*impl_, options, "group " + std::to_string(id)), options.timeout());
}

}  // namespace cohort
