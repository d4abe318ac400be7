// What a Trainer checkpoint holds and how a fit resumes from one (see trainer_impl.h): the strategy's
// state (model and optimizer, or the ZeRO engine's shards), the LR scheduler, the training sampler's
// epoch and position, the step, the global batch and every callback's numbers.
#include <cstdio>
#include <filesystem>

#include "cohort/error.h"
#include "trainer/trainer_impl.h"

namespace cohort::detail {

CheckpointState TrainerImpl::checkpoint_state() {
  CheckpointState state;
  strategy->add_to(state);
  if (scheduler.scheduler) state.add("scheduler", *scheduler.scheduler);
  state.add("sampler", train->sampler(), samples_in_epoch);
  state.set("trainer.global_batch", std::to_string(train->options().batch_size() * strategy->data_split(world).first));
  std::map<std::string, std::string> values;
  for (const auto& callback : callbacks) callback->save_state(values);
  for (const auto& [key, value] : values) state.set(key, value);
  state.set_step(step);
  return state;
}

std::string TrainerImpl::save(const std::string& dir, int keep_last) {
  COHORT_CHECK(train != nullptr && strategy != nullptr, "Trainer::save_checkpoint(\"", dir,
               "\") outside fit: a checkpoint holds the training position, which exists only while fit runs");
  CheckpointState state = checkpoint_state();
  return save_checkpoint(dir, state, SaveOptions().keep_last(keep_last));
}

std::string TrainerImpl::resolve_ckpt_path(const std::string& ckpt_path) {
  if (ckpt_path != "last") return ckpt_path;
  for (const auto& callback : callbacks)
    if (auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get())) return checkpoint->last_dir();
  return owner.root_dir() + "/checkpoints";
}

void TrainerImpl::resume(const std::string& ckpt_path) {
  const std::string dir = resolve_ckpt_path(ckpt_path);
  CheckpointState state = checkpoint_state();
  // "last" with nothing saved yet starts from scratch (a first run); a named path must exist.
  const auto info = load_checkpoint(dir, state, LoadOptions().must_exist(ckpt_path != "last"));
  if (!info) return;
  const std::string saved_batch = state.get("trainer.global_batch");
  const std::string batch = std::to_string(train->options().batch_size() * strategy->data_split(world).first);
  COHORT_CHECK(saved_batch == batch, "the checkpoint ", info->path, " was saved with a global batch of ", saved_batch,
               " samples, this run has ", batch, " (batch_size x ranks): keep the global batch to resume");
  step = state.step();
  epoch = train->sampler().epoch();
  if (world.is_main()) {
    std::printf("resumed from %s (step %lld, saved by %d rank(s))%s\n", info->path.c_str(),
                static_cast<long long>(info->step), info->world_size,
                info->skipped.empty() ? "" : "; newer checkpoints were unusable, see the log");
    std::fflush(stdout);
  }
  for (const auto& callback : callbacks) callback->load_state(state.user_values());
}

}  // namespace cohort::detail
