// What a Trainer checkpoint holds and how a fit resumes from one (checkpoint_connector.h): the strategy's
// state (model and optimizer, or the ZeRO engine's shards), the LR scheduler, the training sampler's
// epoch and position, the step, the global batch and every callback's numbers. A fit resumes by
// itself when the launcher restarted the job, and in another world size keeps the checkpoint's
// samples per optimizer step by accumulating micro-batches (an elastic restart on fewer ranks).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "checkpoint/counter_values.h"
#include "checkpoint/entry.h"
#include "checkpoint/group.h"
#include "cohort/error.h"
#include "cohort/number.h"
#include "core/check.h"
#include "trainer/checkpoint_connector.h"
#include "trainer/job_checkpoints.h"
#include "trainer/trainer_impl.h"
#include "trainer/trainer_values.h"
#include "world/launch_env.h"

namespace cohort::detail {
namespace {

// TORCHELASTIC_RESTART_COUNT as cohortrun and torchrun set it (0 when no launcher restarted the job),
// the largest any rank was given: torchrun counts per node, so a node whose workers did not fail may
// say 0 where another says 1, and the ranks must take the same path (hostile pass 17, S-2).
int agreed_restart_count() {
  int most = 0;
  const int mine = detect_launch_env(current_env()).restart_count.value_or(0);
  for (const std::string& count : ckpt::Group(nullptr).allgather(std::to_string(mine)))
    most = std::max(most, std::atoi(count.c_str()));
  return most;
}

}  // namespace

CheckpointState CheckpointConnector::checkpoint_state() {
  CheckpointState state;
  trainer_.strategy->add_to(state);
  if (trainer_.scheduler.scheduler) state.add("scheduler", *trainer_.scheduler.scheduler);
  state.add("sampler", trainer_.train->sampler(), trainer_.samples_in_epoch);
  const int64_t micro = trainer_.train->options().batch_size() * trainer_.strategy->data_split(trainer_.world).first;
  state.set(kGlobalBatchKey, std::to_string(micro));  // one micro-batch on every share
  state.set(ckpt::kTrainerStepBatchKey,
            std::to_string(micro * trainer_.strategy->accumulation()));  // per optimizer step
  state.set(ckpt::kSegmentEpochKey, std::to_string(trainer_.segment.epoch));
  state.set(ckpt::kSegmentStepKey, std::to_string(trainer_.segment.step));
  state.set(ckpt::kSegmentSamplesKey, std::to_string(trainer_.segment.samples));
  state.set(ckpt::kEpochBatchesKey, std::to_string(trainer_.train_batches));
  std::map<std::string, std::string> values;
  for (const auto& callback : trainer_.callbacks) callback->save_state(values);
  for (const auto& [key, value] : values) state.set(key, value);
  for (const auto& [key, value] : job_.values()) state.set(key, value);
  state.set_step(trainer_.step);
  // Checked before anything loads, so a damaged value falls back to an older checkpoint.
  state.check_user_values([this](const std::map<std::string, std::string>& user, int saved_world_size) {
    check_trainer_values(user, saved_world_size);
    if (own_only_) check_saved_by_job(user, job_);
    for (const auto& callback : trainer_.callbacks) callback->check_state(user);
  });
  return state;
}

std::string CheckpointConnector::save(const std::string& dir, int keep_last, bool async) {
  COHORT_CHECK_KIND(kInvalidArgument, trainer_.train != nullptr && trainer_.strategy != nullptr,
                    "Trainer::save_checkpoint(\"", dir,
                    "\") outside fit: a checkpoint holds the training position, which exists only while fit runs");
  // The state of a save is that of an optimizer step: the gradients of a half-accumulated step are in
  // no checkpoint, so a resume from one would lose those batches.
  COHORT_CHECK_KIND(kInvalidArgument, !trainer_.mid_accumulation, "Trainer::save_checkpoint(\"", dir, "\") at batch ",
                    trainer_.last_batch_index + 1, " of epoch ", trainer_.epoch, ", inside an accumulation of ",
                    trainer_.strategy->accumulation(),
                    " batches: a checkpoint holds the state after an optimizer step; save from a callback's "
                    "on_train_batch_end (called after each step) or at an epoch's end");
  CheckpointState state = checkpoint_state();
  // Every rank's sums of the epoch so far, so that a resume in it reports the means of all its batches
  // (and a resume at its very end, the end-of-epoch callbacks, the values they would have seen).
  const auto sums = ckpt::Group(nullptr).allgather(trainer_.metrics.epoch_sums_text(Stage::kTrain));
  state.set(kEpochSumsRanks, std::to_string(sums.size()));
  state.set(kEpochSumsReplicas, std::to_string(logging_replicas()));
  for (size_t r = 0; r < sums.size(); ++r) state.set(epoch_sums_key(static_cast<int>(r)), sums[r]);
  return save_checkpoint(dir, state, SaveOptions().keep_last(keep_last).async(async));
}

int64_t CheckpointConnector::logging_replicas() const {
  return trainer_.world.size() / trainer_.strategy->data_split(trainer_.world).first;
}

// The saved ranks' epoch sums this rank takes over: its own at the same world size and layout, else
// rank 0 takes them all (a sum over ranks, as every sync_dist mean is, stays exact) and the others
// none (their synchronized names at zero), scaled from the saved run's logging replicas to this
// run's: a pipeline of 2 stages saved each sample's loss twice, and resumed on 1 rank it counted the
// steps before the save twice (hostile pass 5, M1).
void CheckpointConnector::restore_epoch_sums(const CheckpointState& state, const std::string& path,
                                             int saved_world_size) {
  const std::string count_text = state.get(kEpochSumsRanks);
  if (count_text.empty()) return;  // saved before checkpoints carried them: the epoch's means start anew
  const int64_t count = parse_integer(count_text, {path + "'s " + kEpochSumsRanks, 0, saved_world_size});
  const std::string replicas_text = state.get(kEpochSumsReplicas);  // absent before: data parallel, 1
  const int64_t saved_replicas = replicas_text.empty()
                                     ? 1
                                     : parse_integer(replicas_text, {path + "'s " + kEpochSumsReplicas, 1, count});
  const int64_t replicas = logging_replicas();
  std::vector<std::string> texts;
  const bool same_layout = count == trainer_.world.size() && saved_replicas == replicas;
  for (int64_t r = 0; r < count; ++r)
    if (same_layout ? r == trainer_.world.rank() : trainer_.world.rank() == 0)
      texts.push_back(state.get(epoch_sums_key(static_cast<int>(r))));
  // The other ranks hold the synchronized names with nothing summed: an epoch ending before their
  // next step (a resume at its last step) still takes every rank into the means' collective.
  if (!same_layout && trainer_.world.rank() != 0) {
    trainer_.metrics.restore_synced_names(Stage::kTrain, count > 0 ? state.get(epoch_sums_key(0)) : "", path);
    return;
  }
  trainer_.metrics.restore_epoch_sums(Stage::kTrain, texts, path, replicas, saved_replicas);  // equal: unscaled
}

std::string CheckpointConnector::resolve_ckpt_path(const std::string& ckpt_path) {
  if (ckpt_path != "last") return ckpt_path;
  for (const auto& callback : trainer_.callbacks)
    if (auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get())) return checkpoint->last_dir();
  return trainer_.owner.root_dir() + "/checkpoints";
}

// Every rank's launch identity, then rank 0 claims the job in the directory whose lock it holds
// (ModelCheckpoint::on_fit_start took it); every rank follows its answer, or fails with its error.
JobClaim CheckpointConnector::agree_job_claim(const std::string& dir, bool restart) {
  std::set<std::string> distinct;
  for (const std::string& launch : ckpt::Group(nullptr).allgather(launch_identity()))
    if (!launch.empty()) distinct.insert(launch);
  const std::vector<std::string> launches(distinct.begin(), distinct.end());
  std::string said;
  if (trainer_.world.is_main()) {
    try {
      const JobClaim claim = claim_job(dir, restart, launches);
      said = std::string("T") + (claim.holds_own_checkpoint ? "1" : "0") + (claim.token_lost ? "1" : "0") +
             claim.identity.token;
    } catch (const Error& e) {
      said = "E" + ckpt::without_rank_prefix(e.what());
    }
  }
  said = ckpt::Group(nullptr).allgather(said).front();
  COHORT_CHECK_KIND(kIO, said.rfind('T', 0) == 0 && said.size() >= 3, said.substr(1));
  JobClaim claim;
  claim.identity.launches = launches;
  claim.holds_own_checkpoint = said[1] == '1';
  claim.token_lost = said[2] == '1';
  claim.identity.token = said.substr(3);
  return claim;
}

std::string CheckpointConnector::checkpoint_to_resume(const FitOptions& fit_options) {
  restart_ = agreed_restart_count();  // a collective: every rank's fit comes here
  const std::string given = fit_options.ckpt_path();
  const bool saves = std::any_of(trainer_.callbacks.begin(), trainer_.callbacks.end(), [](const auto& callback) {
    return dynamic_cast<ModelCheckpoint*>(callback.get()) != nullptr;
  });
  if (!fit_options.resume_on_restart() || !saves) return given;
  const int restart = restart_;
  const std::string dir = resolve_ckpt_path("last");
  const JobClaim claim = agree_job_claim(dir, restart > 0);
  job_ = claim.identity;
  if (restart == 0) return given;
  const bool main = trainer_.world.is_main();
  if (claim.holds_own_checkpoint) {
    own_only_ = true;
    restart_fallback_ = given;
    if (main)
      std::printf(
          "restart %d of this job (TORCHELASTIC_RESTART_COUNT): continuing from the newest checkpoint it "
          "saved in %s%s\n",
          restart, dir.c_str(), given.empty() || given == "last" ? "" : (", not from " + given).c_str());
    std::fflush(stdout);
    return "last";
  }
  if (main) {
    const std::string why = claim.token_lost
                                ? " (its token file " + std::string(kJobTokenFile) + " is missing or damaged)"
                                : "";
    // ckpt_path "last" is the newest checkpoint in the directory, as the first attempt took it (hostile
    // pass 16, m-4: "again from last").
    const std::string from = given.empty()     ? "from scratch"
                             : given == "last" ? "again from the newest checkpoint in " + dir + " (if any)"
                                               : "again from " + given;
    std::printf(
        "restart %d of this job (TORCHELASTIC_RESTART_COUNT): %s holds no checkpoint this job saved%s: "
        "starting %s, as its first attempt did\n",
        restart, dir.c_str(), why.c_str(), from.c_str());
  }
  std::fflush(stdout);
  return given;
}

void CheckpointConnector::keep_global_batch(const CheckpointState& state, const std::string& path,
                                            int saved_world_size) {
  const int64_t micro = trainer_.train->options().batch_size() * trainer_.strategy->data_split(trainer_.world).first;
  const std::string saved_step = state.get(ckpt::kTrainerStepBatchKey);
  const bool elastic = saved_world_size != trainer_.world.size() || restart_ > 0;
  if (saved_step.empty() || !elastic) {  // as saved before elastic restarts, or a resume by hand
    const std::string saved_batch = state.get(kGlobalBatchKey);
    COHORT_CHECK_KIND(kInvalidArgument, saved_batch == std::to_string(micro), "the checkpoint ", path,
                      " was saved with a global batch of ", saved_batch, " samples, this run has ", micro,
                      " (batch_size x ranks): keep the global batch to resume");
    // Another accumulation is the run's choice (Lightning's too), but not a silent one (hostile pass
    // 12, m-4: a ds_config's 2 left out halved the samples per step without a word).
    const int64_t step_samples = micro * trainer_.strategy->accumulation();
    if (!saved_step.empty() && saved_step != std::to_string(step_samples) && trainer_.world.is_main()) {
      std::printf(
          "the checkpoint %s took %s samples per optimizer step, this run takes %lld (%lld accumulated "
          "batch(es) of %lld): the rate of learning per sample changes\n",
          path.c_str(), saved_step.c_str(), static_cast<long long>(step_samples),
          static_cast<long long>(trainer_.strategy->accumulation()), static_cast<long long>(micro));
      std::fflush(stdout);
    }
    return;
  }
  // A user value of the manifest (no checksum covers it): refused in one line when it is no count.
  const int64_t step_batch = parse_integer(saved_step,
                                           {path + "'s trainer.step_batch", 1, INT64_MAX, "a sample count"});
  const int64_t batch = trainer_.train->options().batch_size();
  if (step_batch == micro * trainer_.strategy->accumulation()) return;
  const int64_t accumulate = step_batch / micro;
  if (step_batch % micro == 0 && trainer_.strategy->set_accumulation(accumulate)) {
    trainer_.options.raw.accumulate_grad_batches(accumulate);
    if (trainer_.world.is_main())
      std::printf(
          "world size %d -> %d: each optimizer step accumulates %lld batches of %lld samples per rank, "
          "keeping the checkpoint's %lld samples per step\n",
          saved_world_size, trainer_.world.size(), static_cast<long long>(accumulate), static_cast<long long>(batch),
          static_cast<long long>(step_batch));
    std::fflush(stdout);
    return;
  }
  // What this run takes per step, accumulation included (hostile pass 11, m-a: a ds_config's accumulation
  // of 2 read "cannot accumulate").
  const int64_t accumulation = trainer_.strategy->accumulation();
  const std::string takes = accumulation > 1
                                ? std::to_string(micro) + " per batch (batch_size x ranks) x " +
                                      std::to_string(accumulation) +
                                      " accumulated = " + std::to_string(micro * accumulation) + " per step"
                                : std::to_string(micro) + " per batch (batch_size x ranks)";
  const std::string why = step_batch % micro != 0 ? "it does not divide them"
                          : accumulation > 1      ? "its strategy cannot accumulate another number of batches"
                                                  : "its strategy cannot accumulate batches";
  COHORT_CHECK_KIND(kInvalidArgument, restart_ > 0, "the checkpoint ", path, " was saved with ", step_batch,
                    " samples per optimizer step by ", saved_world_size, " rank(s); this run's ", trainer_.world.size(),
                    " rank(s) take ", takes, ", and ", why, ": choose a batch size that keeps the global batch");
  // A launcher's restart into a world that cannot keep the batch goes on, as under torchrun: the global
  // batch follows the world. The epoch resumes at the first whole step of the new size: the loop's
  // accumulation windows (every accumulation-th batch of the epoch) and the ZeRO engine's (which begin
  // at the load) then agree (hostile pass 11, S-d: a resume at an odd batch under accumulation 2
  // stopped every restart on "the accumulation boundary ... disagree").
  const int64_t step_samples = micro * trainer_.strategy->accumulation();
  const int64_t skipped = (step_samples - trainer_.samples_in_epoch % step_samples) % step_samples;
  // Saved at the epoch's last step, the position is past the data: the rounding skips nothing there
  // (hostile pass 10, minor 5: "22 samples of this epoch are skipped" of a complete epoch).
  const bool epoch_done = trainer_.resumed.epoch_done ||
                          trainer_.samples_in_epoch >= static_cast<int64_t>(trainer_.train->dataset().size());
  trainer_.samples_in_epoch += skipped;  // the position of a whole step of the new size, as the loop counts it
  if (trainer_.world.is_main())
    std::printf(
        "world size %d -> %d: the checkpoint's %lld samples per optimizer step cannot be kept (%lld per "
        "batch, batch_size x ranks; %s): steps take %lld samples from here%s\n",
        saved_world_size, trainer_.world.size(), static_cast<long long>(step_batch), static_cast<long long>(micro),
        why.c_str(), static_cast<long long>(step_samples),
        skipped == 0 || epoch_done ? ""
                                   : ("; " + std::to_string(skipped) + " samples of this epoch are skipped").c_str());
  std::fflush(stdout);
}

// Whether the saved position is its epoch's last batch, as the saving run counted them: another
// layout of the same data (drop_last at another data-parallel size) may have a batch more, which the
// saved epoch never had (hostile pass 12, M-3: the resume trained one more step of a finished epoch).
bool CheckpointConnector::saved_epoch_done(const CheckpointState& state) const {
  const std::string batches = state.get(ckpt::kEpochBatchesKey), global = state.get(kGlobalBatchKey);
  if (batches.empty() || global.empty() || trainer_.samples_in_epoch == 0) return false;
  const int64_t per_batch = parse_integer(global, {kGlobalBatchKey, 1, INT64_MAX, "a sample count"});
  const int64_t taken = (trainer_.samples_in_epoch + per_batch - 1) / per_batch;
  return taken >= parse_integer(batches, {ckpt::kEpochBatchesKey, 1, INT64_MAX, "a batch count"});
}

void CheckpointConnector::resume(const std::string& ckpt_path) {
  const std::string dir = resolve_ckpt_path(ckpt_path);
  CheckpointState state = checkpoint_state();
  // "last" with nothing saved yet starts from scratch (a first run); a named path must exist.
  std::optional<CheckpointInfo> info;
  try {
    info = load_checkpoint(dir, state, LoadOptions().must_exist(ckpt_path != "last"));
  } catch (const Error& e) {
    // A restart whose own checkpoints are all unusable (damaged on disk) starts where its first attempt
    // did, as one that saved none, instead of failing the same way on every restart (hostile pass 16,
    // M-1). The ranks agree on a load's failure, so all take this path; nothing was loaded.
    const std::string text = e.what();
    if (!own_only_ || e.kind() != ErrorKind::kIO || text.find("no usable checkpoint in ") == std::string::npos) throw;
    own_only_ = false;
    if (trainer_.world.is_main()) {
      std::printf(
          "none of the checkpoints this job saved in %s is usable (%s): starting %s, as its first attempt did\n",
          dir.c_str(), ckpt::without_rank_prefix(text).c_str(),
          restart_fallback_.empty()     ? "from scratch"
          : restart_fallback_ == "last" ? ("again from the newest checkpoint in " + dir).c_str()
                                        : ("again from " + restart_fallback_).c_str());
      std::fflush(stdout);
    }
    if (!restart_fallback_.empty()) resume(restart_fallback_);
    return;
  }
  if (!info) return;
  trainer_.resumed.epoch_done = saved_epoch_done(state);  // before keep_global_batch moves the position
  keep_global_batch(state, info->path, info->world_size);
  trainer_.step = state.step();
  trainer_.epoch = trainer_.train->sampler().epoch();
  trainer_.resumed.path = info->path;
  trainer_.resumed.lr = trainer_.strategy->lr();
  restore_epoch_sums(state, info->path, info->world_size);
  if (trainer_.world.is_main()) {
    std::printf("resumed from %s (step %lld, saved by %d rank(s))%s\n", info->path.c_str(),
                static_cast<long long>(info->step), info->world_size,
                info->skipped.empty() ? "" : "; newer checkpoints were unusable, see the log");
    std::fflush(stdout);
  }
  for (const auto& callback : trainer_.callbacks) callback->load_state(state.user_values());
}

}  // namespace cohort::detail
