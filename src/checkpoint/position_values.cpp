// check_trainer_position (see position_values.h).
#include "checkpoint/position_values.h"

#include <set>

#include "checkpoint/counter_values.h"
#include "checkpoint/sampler_values.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "core/check.h"
#include "core/text.h"

namespace cohort::detail::ckpt {
namespace {

constexpr int64_t kWholeDoubles = (int64_t{1} << 53) - 1;  // every count a checkpoint's doubles hold

// The user value `key`, a whole number in [low, high], or an Error (kIO) naming it.
int64_t user_integer(const Manifest& m, const char* key, int64_t low, int64_t high, const std::string& what) {
  const auto found = m.user.find(key);
  COHORT_CHECK_KIND(kIO, found != m.user.end(), "there is no 'user.", key,
                    "': a Trainer saves its batch sizes and where its stretch of steps began together");
  try {
    return parse_integer(found->second, {std::string("'user.") + key + "'", low, high, what});
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kIO);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool has_segment(const Manifest& m) {
  return m.user.count(kSegmentEpochKey) || m.user.count(kSegmentStepKey) || m.user.count(kSegmentSamplesKey);
}

// The batches a whole epoch of the sampler's data makes at one global batch: an epoch takes no more
// (limit_train_batches and drop_last take fewer), and only this many can end on a short batch (hostile
// pass 11, M-f: epoch_batches lowered to the batches taken let any samples_in_epoch pass as the last).
int64_t epoch_batches_of(const Manifest& m, const StateValues& v, int64_t batch, int64_t* all_data) {
  const int64_t epoch_batches = user_integer(m, kEpochBatchesKey, 1, kWholeDoubles, "a batch count");
  const auto size = v.find("dataset_size");
  if (size == v.end()) return epoch_batches;  // check_sampler_values names it
  *all_data = ceil_div(static_cast<int64_t>(size->second), batch);
  COHORT_CHECK_KIND(kIO, epoch_batches <= *all_data, "'user.", kEpochBatchesKey, "' is ", epoch_batches,
                    ", more batches of ", batch, " samples ('user.", kTrainerGlobalBatchKey,
                    "') than the sampler's dataset_size ", static_cast<int64_t>(size->second), " makes (", *all_data,
                    ")");
  return epoch_batches;
}

}  // namespace

void check_trainer_sampler(const Manifest& m) {
  if (!has_segment(m)) return;
  const auto found = m.values.find("sampler");
  COHORT_CHECK_KIND(kIO, found != m.values.end(),
                    "'values' has no 'sampler': a Trainer checkpoint ('user.trainer.segment.*') saves its sampler's "
                    "position there");
  // Three keys or more are a sampler's and checked as such where each entry is; fewer are named here.
  if (!is_sampler_values(found->second)) check_sampler_values(found->second, "sampler", m.world_size);
}

void check_trainer_rng(const Manifest& m) {
  if (!has_segment(m)) return;
  const TensorRecord* rng = m.find("rng/cpu");
  COHORT_CHECK_KIND(kIO, rng != nullptr,
                    "there is no tensor 'rng/cpu': a Trainer checkpoint ('user.trainer.segment.*') saves each rank's "
                    "generator state there");
  std::set<int> ranks;
  for (const Piece& piece : rng->pieces) ranks.insert(piece.rank);
  for (int r = 0; r < m.world_size; ++r)
    COHORT_CHECK_KIND(kIO, ranks.count(r), "tensor 'rng/cpu' has no piece of rank ", r, " of the ", m.world_size,
                      " that saved it: a Trainer checkpoint saves every rank's generator state");
}

void check_trainer_position(const Manifest& m, const std::string& entry) {
  const auto found = m.values.find(entry);
  if (found == m.values.end() || !is_sampler_values(found->second)) return;
  if (!has_segment(m)) return;
  const StateValues& v = found->second;
  for (const char* key : {"epoch", "samples_in_epoch"}) {
    COHORT_CHECK_KIND(kIO, v.count(key), "'values.", excerpt(entry), "' has no '", key, "'");
    check_whole_value(v, entry, key, 0, double(kWholeDoubles), "0..9007199254740991 (2^53 - 1)");
  }
  const auto epoch = static_cast<int64_t>(v.at("epoch"));
  const auto samples = static_cast<int64_t>(v.at("samples_in_epoch"));
  const int64_t first_epoch = user_integer(m, kSegmentEpochKey, 0, kWholeDoubles, "an epoch");
  // Every epoch before takes a step at least (hostile pass 10, M3: epoch 1 "begun" at step 0).
  const int64_t first_step = user_integer(m, kSegmentStepKey, first_epoch, m.step,
                                          "a step from the segment's epoch (each epoch takes one at least) up to the "
                                          "manifest's step");
  const int64_t first_samples = user_integer(m, kSegmentSamplesKey, 0, samples,
                                             "a sample count up to the sampler's samples_in_epoch");
  // Where the stretch began is a position a run reaches (hostile pass 12, M-2: epoch 0 "begun" at step
  // 1 with no sample taken replayed a batch). In epoch 0 every earlier step took samples of it: step 0
  // exactly when none was taken, and a sample a step at least; later, a sample taken means a step of
  // this epoch besides one of each earlier epoch.
  if (first_epoch == 0) {
    COHORT_CHECK_KIND(kIO, (first_step == 0) == (first_samples == 0) && first_samples >= first_step,
                      "'user.trainer.segment.step' ", first_step, " and 'user.trainer.segment.samples' ", first_samples,
                      " in epoch 0: no run has taken that many samples by that step");
  } else {
    COHORT_CHECK_KIND(kIO, first_samples == 0 || first_step > first_epoch, "'user.trainer.segment.step' ", first_step,
                      " and 'user.trainer.segment.samples' ", first_samples, " in epoch ", first_epoch,
                      ": samples taken in this epoch need a step of it after one of each earlier epoch");
  }
  const int64_t batch = user_integer(m, kTrainerGlobalBatchKey, 1, kWholeDoubles, "a sample count");
  const int64_t step_batch = user_integer(m, kTrainerStepBatchKey, batch, kWholeDoubles, "a sample count");
  COHORT_CHECK_KIND(kIO, step_batch % batch == 0, "'user.", kTrainerStepBatchKey, "' ", step_batch,
                    " is no whole number of batches of 'user.", kTrainerGlobalBatchKey, "' ", batch);
  COHORT_CHECK_KIND(kIO, epoch == first_epoch, "'values.", excerpt(entry), ".epoch' is ", epoch,
                    ", but the Trainer's steps since step ", first_step, " are all of epoch ", first_epoch, " ('user.",
                    kSegmentEpochKey, "')");
  // A step ends at every accumulate-th batch of the epoch, and at its last: saves land only there.
  const int64_t accumulate = step_batch / batch;
  const int64_t batches = ceil_div(samples, batch), first_batches = ceil_div(first_samples, batch);
  int64_t all_data = -1;
  const int64_t epoch_batches = epoch_batches_of(m, v, batch, &all_data);
  // Whole batches but the last of an epoch over all the data, whose samples may be fewer (hostile pass
  // 10, S2: 385 for 512 resumed, and the run's next checkpoint was BAD).
  const bool short_last = batches == epoch_batches && epoch_batches == all_data;
  COHORT_CHECK_KIND(kIO, short_last || samples == batches * batch, "'values.", excerpt(entry), ".samples_in_epoch' is ",
                    samples, ": not ", batches, " whole batch(es) of ", batch, " samples ('user.",
                    kTrainerGlobalBatchKey, "')",
                    batches == epoch_batches ? "; the epoch's last may be short only when it takes all the data"
                                             : " before the epoch's last of " + std::to_string(epoch_batches));
  COHORT_CHECK_KIND(kIO, batches <= epoch_batches && (batches % accumulate == 0 || batches == epoch_batches),
                    "'values.", excerpt(entry), ".samples_in_epoch' is ", samples, ", ", batches, " batch(es) of ",
                    batch, " samples: no optimizer step of ", accumulate, " batch(es) in an epoch of ", epoch_batches,
                    " ('user.", kEpochBatchesKey, "') ends there");
  const int64_t steps = ceil_div(batches, accumulate) - first_batches / accumulate;
  COHORT_CHECK_KIND(kIO, m.step - first_step == steps, "'values.", excerpt(entry), ".samples_in_epoch' is ", samples,
                    ": ", batches - first_batches, " batch(es) of ", batch, " samples since ", first_samples,
                    " at step ", first_step, " ('user.trainer.segment.*'), ", steps, " optimizer step(s) of ",
                    accumulate, " batch(es), not the ", m.step - first_step, " up to the checkpoint's step ", m.step);
}

}  // namespace cohort::detail::ckpt
