// Which checkpoints a launcher's restart may continue from when the job's first attempt started from
// scratch (FitOptions::resume_on_restart without a ckpt_path, the examples' --resume never): only those
// this job saved, known by the launcher's run id the Trainer writes into each (hostile pass 14, S-2: a
// restart before the first save took an earlier job's checkpoint in the same directory).
#pragma once

#include <map>
#include <string>

namespace cohort::detail {

/// The user value that holds the run id (TORCHELASTIC_RUN_ID) of the job that saved a checkpoint.
inline constexpr const char* kRunIdKey = "trainer.run_id";

/// The launcher's run id of this job ("" when the launcher gave none).
std::string launcher_run_id();

/// Whether a step directory in `dir` holds a readable checkpoint whose run id is `run_id`.
bool holds_checkpoint_of_run(const std::string& dir, const std::string& run_id);

/// Throws kIO naming both run ids when `user` (a checkpoint's values) was saved by another job than
/// `run_id`: the load then falls back to an older checkpoint, as for any unusable one.
void check_saved_by_run(const std::map<std::string, std::string>& user, const std::string& run_id);

}  // namespace cohort::detail
