// The Trainer's checkpoints: what one holds (the strategy's state, the LR scheduler, the training
// sampler's epoch and position, the step, the global batch, the training epoch's logged sums and every
// callback's numbers) and how a fit resumes from one. Like Lightning's checkpoint connector, it reads
// and sets the progress of the trainer it serves.
#pragma once

#include <string>

#include "cohort/checkpoint.h"
#include "cohort/trainer.h"
#include "trainer/job_checkpoints.h"

namespace cohort::detail {

class TrainerImpl;

class CheckpointConnector {
 public:
  explicit CheckpointConnector(TrainerImpl& trainer) : trainer_(trainer) {}

  /// Trainer::save_checkpoint: refused outside fit and inside an accumulation.
  std::string save(const std::string& dir, int keep_last, bool async);
  /// fit's checkpoint: ckpt_path, or on a launcher's restart (FitOptions::resume_on_restart) "last" when
  /// this job saved a checkpoint (job_checkpoints.h).
  std::string checkpoint_to_resume(const FitOptions& fit_options);
  /// Loads `ckpt_path` ("last": the newest, or nothing when none was saved yet) into the trainer.
  void resume(const std::string& ckpt_path);

 private:
  CheckpointState checkpoint_state();
  /// After loading: keeps the checkpoint's samples per optimizer step in another world size by
  /// accumulating micro-batches; refuses a global batch it cannot keep.
  void keep_global_batch(const CheckpointState& state, const std::string& path, int saved_world_size);
  bool saved_epoch_done(const CheckpointState& state) const;
  /// After loading: the training epoch's logged sums the checkpoint carries (this rank's share).
  void restore_epoch_sums(const CheckpointState& state, const std::string& path, int saved_world_size);
  int64_t logging_replicas() const;
  std::string resolve_ckpt_path(const std::string& ckpt_path);
  JobClaim agree_job_claim(const std::string& dir, bool restart);

  TrainerImpl& trainer_;
  /// What this job is known by (job_checkpoints.h), which every save records; empty when nothing saves.
  JobIdentity job_;
  /// A restart continuing its own checkpoints: every checkpoint it loads must be this job's.
  bool own_only_ = false;
  /// The launcher's restart count, agreed by every rank in checkpoint_to_resume.
  int restart_ = 0;
  /// Such a restart's ckpt_path, where it starts again when none of its own checkpoints is usable.
  std::string restart_fallback_;
};

}  // namespace cohort::detail
