// Checkpoints of the Fashion-MNIST job (see checkpointing.h).
#include "checkpointing.h"

#include <cohort/error.h>

#include <cstdio>

namespace fashion_mnist {

Checkpointing::Checkpointing(const TrainConfig& config, cohort::CheckpointState state)
    : config_(config), state_(std::move(state)) {
  COHORT_CHECK(config_.checkpoint_every >= 0, "--checkpoint-every must be >= 0");
}

std::string Checkpointing::resume() {
  if (config_.resume == "never") return "";
  const bool automatic = config_.resume == "auto";
  if (automatic && config_.checkpoint_dir.empty()) return "";
  const std::string from = automatic ? config_.checkpoint_dir : config_.resume;
  const auto info =
      cohort::load_checkpoint(from, state_, cohort::LoadOptions().must_exist(!automatic));
  if (!info) return "";
  saved_step_ = info->step;
  char line[512];
  std::snprintf(line, sizeof line, "resumed from %s (step %lld, saved by %d rank(s))%s",
                info->path.c_str(), static_cast<long long>(info->step), info->world_size,
                info->skipped.empty() ? "" : "; newer checkpoints were unusable, see the log");
  return line;
}

void Checkpointing::after_step(int64_t step, bool last) {
  if (config_.checkpoint_dir.empty() || step == saved_step_) return;
  const bool due = config_.checkpoint_every > 0 && step % config_.checkpoint_every == 0;
  if (!due && !last) return;
  cohort::save_checkpoint(config_.checkpoint_dir, state_.set_step(step));
  saved_step_ = step;
}

}  // namespace fashion_mnist
