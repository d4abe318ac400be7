// check_trainer_values (see trainer_values.h).
#include "trainer/trainer_values.h"

#include <cstdint>
#include <set>

#include "checkpoint/counter_values.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "cohort/trainer_callbacks.h"
#include "core/check.h"
#include "core/text.h"
#include "trainer/metrics.h"

namespace cohort::detail {
namespace {

std::string user_key(const std::string& key) { return "'user." + key + "'"; }

// `key`'s whole number in [low, high], or an Error naming it; `fallback` when absent.
int64_t whole_value(const std::map<std::string, std::string>& user, const std::string& key, int64_t low, int64_t high,
                    int64_t fallback) {
  const auto found = user.find(key);
  if (found == user.end()) return fallback;
  try {
    return parse_integer(found->second, {user_key(key), low, high, "a whole number"});
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kIO);
  }
}

void check_epoch_sums(const std::map<std::string, std::string>& user, int saved_world_size) {
  if (!user.count(kEpochSumsRanks)) {  // saved before checkpoints carried them, or deleted (pass 10, S5)
    const auto sums = user.lower_bound("trainer.epoch_sums.");
    COHORT_CHECK_KIND(kIO, sums == user.end() || sums->first.rfind("trainer.epoch_sums.", 0) != 0, "there is no ",
                      user_key(kEpochSumsRanks), " beside ", user_key(sums->first),
                      ": a Trainer saves how many ranks' epoch sums it holds with them");
    return;
  }
  // Every rank's sums are saved (an allgather): fewer resumed to one rank's share of the mean.
  const int64_t ranks = whole_value(user, kEpochSumsRanks, saved_world_size, saved_world_size, 0);
  const int64_t replicas = whole_value(user, kEpochSumsReplicas, 1, ranks, 1);
  COHORT_CHECK_KIND(kIO, ranks % replicas == 0, user_key(kEpochSumsReplicas), " is ", replicas, ", which does not ",
                    "divide ", user_key(kEpochSumsRanks), " ", ranks, " (each sample is logged by as many ranks)");
  std::set<std::string> first;
  for (int r = 0; r < ranks; ++r) {
    const auto text = user.find(epoch_sums_key(r));
    COHORT_CHECK_KIND(kIO, text != user.end(), "there is no ", user_key(epoch_sums_key(r)), " of the ", ranks,
                      " ranks' epoch sums");
    const auto synced = MetricStore::synced_names_of(text->second, user_key(epoch_sums_key(r)));
    if (r == 0) first = synced;
    // Every rank logs a sync_dist name (its mean is a collective): a difference would desync.
    COHORT_CHECK_KIND(kIO, synced == first, user_key(epoch_sums_key(r)), " logs ",
                      synced.size() == first.size() ? "other synchronized names than "
                                                    : std::to_string(synced.size()) + " synchronized name(s), ",
                      user_key(epoch_sums_key(0)),
                      synced.size() == first.size() ? "" : " " + std::to_string(first.size()),
                      ": every rank logs the same");
  }
}

}  // namespace

std::string epoch_sums_key(int rank) { return "trainer.epoch_sums." + std::to_string(rank); }

void check_trainer_values(const std::map<std::string, std::string>& user, int saved_world_size) {
  if (!user.count(ckpt::kTrainerStepBatchKey)) return;
  whole_value(user, ckpt::kTrainerStepBatchKey, 1, INT64_MAX, 1);
  COHORT_CHECK_KIND(kIO, user.count(kGlobalBatchKey), "there is no ", user_key(kGlobalBatchKey), " beside ",
                    user_key(ckpt::kTrainerStepBatchKey));
  whole_value(user, kGlobalBatchKey, 1, INT64_MAX, 1);
  check_epoch_sums(user, saved_world_size);
  try {  // the built-in callbacks' numbers, as their load_state reads them
    ModelCheckpoint().check_state(user);
    EarlyStopping(EarlyStoppingOptions().monitor("check")).check_state(user);
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kIO);
  }
}

}  // namespace cohort::detail
