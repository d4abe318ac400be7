// A checkpoint's tensor of another kind than the run's: a pipeline's (its stages own their layers)
// resumed by a whole model on every rank, or the other way, is refused naming that layout, not only the
// tensor (hostile pass 14, m-3).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/checkpoint.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_kinds_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

// One tensor "w" of the given kind.
struct OneTensor : cohort::Stateful {
  explicit OneTensor(cohort::StateKind kind) : kind(kind) {}
  std::vector<cohort::StateTensor> state_tensors() override { return {{"w", weight, kind}}; }
  cohort::StateKind kind;
  torch::Tensor weight = torch::ones({3});
};

std::string resume_error(cohort::StateKind saved, cohort::StateKind loading) {
  char name[] = "/tmp/checkpoint_kinds_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  OneTensor before(saved), after(loading);
  cohort::CheckpointState save_state, load_state;
  save_state.add("model", before).rng(false).set_step(1);
  cohort::save_checkpoint(dir, save_state);
  load_state.add("model", after).rng(false);
  const std::string error = cohort::testing::error_of([&] { cohort::load_checkpoint(dir, load_state); });
  fs::remove_all(dir);
  return error;
}

}  // namespace

TEST(CheckpointKinds, APipelinesCheckpointAndAWholeModelSayWhichIsWhich) {
  EXPECT_THAT(resume_error(cohort::StateKind::kOwned, cohort::StateKind::kReplicated),
              HasSubstr("tensor 'model/w' is owned in the checkpoint, replicated here (it was saved by a pipeline, "
                        "whose stages own their layers; this run holds the whole model: resume it as a pipeline, or "
                        "start another directory)"));
  EXPECT_THAT(resume_error(cohort::StateKind::kReplicated, cohort::StateKind::kOwned),
              HasSubstr("tensor 'model/w' is replicated in the checkpoint, owned here (it was saved with the whole "
                        "model on every rank; this run is a pipeline: resume it as it was saved, or start another "
                        "directory)"));
  EXPECT_THAT(resume_error(cohort::StateKind::kReplicated, cohort::StateKind::kPerRank),
              ::testing::EndsWith("tensor 'model/w' is replicated in the checkpoint, per_rank here"));
}

}  // namespace checkpoint_kinds_test
