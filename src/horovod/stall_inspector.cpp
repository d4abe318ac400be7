// The stall inspector (see stall_inspector.h).
#include "horovod/stall_inspector.h"

#include <algorithm>
#include <sstream>

#include "core/log.h"

namespace cohort::hvd::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string count_key(int rank) { return "cohort/hvd/submitted/" + std::to_string(rank); }

constexpr size_t kNamesShown = 8;  // per rank, then "... (N more)"

}  // namespace

std::vector<MissingRank> missing_ranks(const std::vector<int64_t>& submitted, int self,
                                       const std::map<int64_t, std::string>& waiting, int64_t oldest) {
  std::vector<MissingRank> missing;
  for (int r = 0; r < int(submitted.size()); ++r) {
    const int64_t count = std::max<int64_t>(submitted[r], 0);
    if (r == self || count > oldest) continue;
    MissingRank m{r, {}};
    for (auto it = waiting.lower_bound(count); it != waiting.end(); ++it) m.names.push_back(it->second);
    missing.push_back(std::move(m));
  }
  return missing;
}

std::string stall_warning(const std::vector<MissingRank>& missing, const StallConfig& config) {
  std::ostringstream out;
  out << "hvd stall: tensors submitted by a subset of ranks have waited more than " << config.seconds
      << " s for the others (HOROVOD_STALL_CHECK_TIME_SECONDS). Missing ranks:";
  for (size_t i = 0; i < missing.size(); ++i) {
    out << (i ? ";" : "") << " " << missing[i].rank << ": [";
    const auto& names = missing[i].names;
    for (size_t k = 0; k < names.size() && k < kNamesShown; ++k) out << (k ? ", " : "") << names[k];
    if (names.size() > kNamesShown) out << ", ... (" << names.size() - kNamesShown << " more)";
    out << "]";
  }
  out << ". Ranks that submit different tensors, or only some ranks submitting, deadlock; cohort's timeout ("
      << config.timeout.count() / 1000.0 << " s, COHORT_TIMEOUT) ends the wait with an error.";
  return out.str();
}

StallInspector::StallInspector(c10::intrusive_ptr<c10d::Store> store, StallConfig config)
    : store_(std::move(store)), config_(config), thread_([this] { run(); }) {}

StallInspector::~StallInspector() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallInspector::submitted(int64_t number, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_[number] = {name, Clock::now(), false};
  submitted_ = std::max(submitted_, number + 1);
}

void StallInspector::finished(int64_t number) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_.erase(number);
}

void StallInspector::run() {
  // Often enough that a rank's posted count is fresh when another rank looks (at most a second old).
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(1.0, config_.seconds / 4)));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, period, [&] { return stop_; })) {
    const int64_t count = submitted_;
    lock.unlock();
    try {
      if (count != posted_) {
        const std::string text = std::to_string(count);
        store_->set(count_key(config_.rank), std::vector<uint8_t>(text.begin(), text.end()));
        posted_ = count;
      }
      inspect();
    } catch (const std::exception& e) {
      COHORT_DEBUG("hvd stall inspector stopped: ", e.what());  // the store is gone: the job is ending
      return;
    }
    lock.lock();
  }
}

std::vector<int64_t> StallInspector::read_counts() {
  std::vector<int64_t> counts(config_.size, -1);
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || !store_->check({count_key(r)})) continue;
    const auto raw = store_->get(count_key(r));
    counts[r] = std::stoll(std::string(raw.begin(), raw.end()));
  }
  return counts;
}

void StallInspector::inspect() {
  std::map<int64_t, std::string> waiting;
  int64_t oldest = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto limit = std::chrono::duration<double>(config_.seconds);
    for (auto& [number, w] : waiting_) {
      waiting[number] = w.name;
      if (!w.warned && Clock::now() - w.since > limit && oldest < 0) oldest = number;
    }
  }
  if (oldest < 0) return;
  auto missing = missing_ranks(read_counts(), config_.rank, waiting, oldest);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [number, w] : waiting_)
    if (number >= oldest && Clock::now() - w.since > std::chrono::duration<double>(config_.seconds)) w.warned = true;
  if (!missing.empty()) COHORT_WARN(stall_warning(missing, config_));
}

}  // namespace cohort::hvd::detail
