// hvd::join's part of the controller (controller.h, note "join"): join() itself, the rounds while some
// ranks have joined (every rank's waiting operations exchanged with their descriptions, joined ranks
// shadowing what they lack) and the round in which the last ranks join.
#include <algorithm>

#include "comm/op_label.h"
#include "core/check.h"
#include "horovod/controller.h"

namespace cohort::hvd::detail {
namespace {

// One operation of a join round, in the order every rank starts them: the lowest active rank's
// description, this rank's own operation (null when it lacks it) and the joined ranks that lack it.
struct Slot {
  WaitingEntry entry;
  std::shared_ptr<Op> own;
  std::vector<int> lacking;
};

struct RankWaiting {
  std::vector<WaitingEntry> unnamed;
  std::vector<WaitingEntry> named;
  bool has(const std::string& name) const {
    return std::any_of(named.begin(), named.end(), [&](const WaitingEntry& e) { return e.name == name; });
  }
};

std::string joined_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// "allreduce(min)", "allgather": what the error says could not be shadowed.
std::string kind_text(const WaitingEntry& entry) {
  return entry.shadow ? entry.kind + "(" + reduce_op_name(entry.shadow->op) + ")" : entry.kind;
}

// The slots every rank computes alike from the exchanged lists: the first `ready_unnamed` unnamed
// operations, then the names every active rank has, in the lowest active rank's order.
std::vector<Slot> plan_slots(const std::vector<RankWaiting>& waiting, const std::vector<bool>& joined,
                             int32_t ready_unnamed, const std::vector<std::shared_ptr<Op>>& unnamed,
                             const std::vector<std::shared_ptr<Op>>& named) {
  const int lead = int(std::find(joined.begin(), joined.end(), false) - joined.begin());
  std::vector<Slot> slots;
  for (int32_t k = 0; k < ready_unnamed; ++k) {
    Slot slot{waiting[lead].unnamed.at(k), k < int32_t(unnamed.size()) ? unnamed[k] : nullptr, {}};
    for (size_t r = 0; r < joined.size(); ++r)
      if (joined[r] && int32_t(waiting[r].unnamed.size()) <= k) slot.lacking.push_back(int(r));
    slots.push_back(std::move(slot));
  }
  for (const auto& entry : waiting[lead].named) {
    bool everywhere = true;
    for (size_t r = 0; r < joined.size(); ++r) everywhere = everywhere && (joined[r] || waiting[r].has(entry.name));
    if (!everywhere) continue;
    Slot slot{entry, nullptr, {}};
    for (const auto& op : named)
      if (op->name == entry.name) slot.own = op;
    for (size_t r = 0; r < joined.size(); ++r)
      if (joined[r] && !waiting[r].has(entry.name)) slot.lacking.push_back(int(r));
    slots.push_back(std::move(slot));
  }
  return slots;
}

}  // namespace

Controller::JoinResult Controller::join(const torch::Device& device) {
  std::unique_lock<std::mutex> lock(mutex_);
  COHORT_CHECK_KIND(kInvalidArgument, !joining_, "hvd::join: this rank is joining already (on another thread)");
  if (failure_) std::rethrow_exception(failure_);
  joining_ = true;
  join_result_.reset();
  shadow_device_ = device;
  wake_.notify_all();
  launched_.wait(lock, [&] { return join_result_.has_value() || failure_ != nullptr; });
  joining_ = false;
  if (!join_result_) std::rethrow_exception(failure_);
  const JoinResult result = *join_result_;
  join_result_.reset();
  return result;
}

void Controller::finish_join(const std::vector<bool>& joined) {
  const JoinResult result{last_joined_, shadowed_unnamed_};
  joined_before_.assign(joined.size(), false);  // ranks may train on and join again (the next epoch)
  last_joined_ = -1;
  shadowed_unnamed_ = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    joining_ = false;  // before the next round: this rank has not joined any more
    join_result_ = result;
  }
  launched_.notify_all();
}

bool Controller::join_round(const std::vector<bool>& joined, int32_t ready_unnamed,
                            const std::vector<std::shared_ptr<Op>>& unnamed,
                            const std::vector<std::shared_ptr<Op>>& named) {
  if (joined_before_.size() != joined.size()) joined_before_.assign(joined.size(), false);
  for (size_t r = 0; r < joined.size(); ++r)
    if (joined[r] && !joined_before_[r]) last_joined_ = int(r);  // ascending: the highest of this round
  joined_before_ = joined;
  if (std::all_of(joined.begin(), joined.end(), [](bool j) { return j; })) {
    finish_join(joined);
    return true;
  }
  // Step (2) in full, with descriptions: a joined rank needs them to shadow what it lacks.
  std::vector<std::string> mine;
  for (const auto& op : unnamed) mine.push_back(encode_entry({false, op->kind, op->name, op->shadow}));
  for (const auto& op : named) mine.push_back(encode_entry({true, op->kind, op->name, op->shadow}));
  std::vector<RankWaiting> waiting;
  for (const auto& list : gather_lists(mine)) {
    RankWaiting rank;
    for (const auto& text : list) {
      auto entry = decode_entry(text);
      (entry.named ? rank.named : rank.unnamed).push_back(std::move(entry));
    }
    waiting.push_back(std::move(rank));
  }
  const auto slots = plan_slots(waiting, joined, ready_unnamed, unnamed, named);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto in_slots = [&](const std::shared_ptr<Op>& op) {
      return std::any_of(slots.begin(), slots.end(), [&](const Slot& s) { return s.own == op; });
    };
    unnamed_.erase(std::remove_if(unnamed_.begin(), unnamed_.end(), in_slots), unnamed_.end());
    named_.erase(std::remove_if(named_.begin(), named_.end(), in_slots), named_.end());
  }
  std::vector<Work> shadows;
  for (const auto& slot : slots) {
    if (slot.entry.named) cache_.add(slot.entry.name);  // every rank adds the same names in the same order
    if (!slot.lacking.empty() && !can_shadow(slot.entry.shadow)) {
      if (slot.own)
        fail(slot.own,
             cohort::detail::str(slot.own->caller, "('", slot.own->name, "'): ", joined_list(slot.lacking),
                                 " called hvd::join(); a joined rank takes part in Sum and Average "
                                 "allreduces only (as in Horovod), not in this ",
                                 kind_text(slot.entry), "; synchronize it before any rank calls hvd::join()"));
    } else if (slot.own) {
      launch(slot.own);
    } else {
      cohort::detail::OpLabelScope scope(slot.entry.name);  // the label is part of the collective's fingerprint
      shadows.push_back(start_shadow(*comm_, *slot.entry.shadow, shadow_device_));
      if (!slot.entry.named) ++shadowed_unnamed_;
    }
  }
  for (auto& work : shadows) work.wait();
  return !slots.empty();
}

void Controller::fail(const std::shared_ptr<Op>& op, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op->error = std::make_exception_ptr(cohort::Error(message, cohort::ErrorKind::kInvalidArgument));
    op->start = nullptr;
    op->launched = true;
  }
  launched_.notify_all();
}

}  // namespace cohort::hvd::detail
