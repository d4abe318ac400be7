// A checkpoint's tensor of another kind than the run's: a pipeline's (its stages own their layers)
// resumed by a whole model on every rank, or the other way, is refused naming that layout, not only the
// tensor (hostile pass 14, m-3); so is the ZeRO engine's state by flat group against by parameter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>

#include "cohort/checkpoint.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_kinds_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

// One tensor of the given kind and name.
struct OneTensor : cohort::Stateful {
  OneTensor(cohort::StateKind kind, std::string name) : kind(kind), name(std::move(name)) {}
  std::vector<cohort::StateTensor> state_tensors() override { return {{name, weight, kind}}; }
  cohort::StateKind kind;
  std::string name;
  torch::Tensor weight = torch::ones({3});
};

std::string resume_error(cohort::StateKind saved, cohort::StateKind loading, const std::string& entry = "model",
                         const std::string& saved_name = "w", const std::string& loading_name = "w") {
  char name[] = "/tmp/checkpoint_kinds_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  OneTensor before(saved, saved_name), after(loading, loading_name);
  cohort::CheckpointState save_state, load_state;
  save_state.add(entry, before).rng(false).set_step(1);
  cohort::save_checkpoint(dir, save_state);
  load_state.add(entry, after).rng(false);
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

// The Trainer saves the ZeRO engine's state by parameter, but by flat group (per tensor-parallel rank
// under tensor parallelism) with the optimizer state on NVMe: a resume across the two says which.
TEST(CheckpointKinds, TheEnginesFlatGroupsAndItsStateByParameterSayWhichIsWhich) {
  const auto kind = cohort::StateKind::kReplicated;
  EXPECT_THAT(
      resume_error(kind, kind, "engine", "group0.master", "fc.weight.master"),
      HasSubstr("it has no tensor 'engine/fc.weight.master': its ZeRO engine's state was saved by flat group "
                "('engine/group0.master': the optimizer state was on NVMe, or a cohort before checkpoint format "
                "5 wrote it), this run's is by parameter: resume it with the offload_optimizer device it was "
                "saved with"));
  EXPECT_THAT(resume_error(kind, kind, "engine", "fc.weight.master", "tp1.group0.master"),
              HasSubstr("it has no tensor 'engine/tp1.group0.master': its ZeRO engine's state was saved by parameter "
                        "('engine/fc.weight.master'), this run keeps its optimizer state on NVMe, which loads the "
                        "flat-group form only: resume it without offload_optimizer nvme"));
  EXPECT_THAT(resume_error(kind, kind, "engine", "tp0.group0.master", "group0.master"),
              HasSubstr("its ZeRO engine's state was saved per tensor-parallel rank ('engine/tp0.group0.master'); "
                        "with the optimizer state on NVMe resume it at the tensor_parallel_size it was saved with"));
  EXPECT_THAT(resume_error(kind, kind, "engine", "group0.master", "tp0.group0.master"),
              HasSubstr("saved whole ('engine/group0.master'), without tensor parallelism; with the optimizer state "
                        "on NVMe resume it at tensor_parallel_size 1"));
  EXPECT_THAT(resume_error(kind, kind, "engine", "fc.weight.master", "fc.bias.master"),
              HasSubstr("it has no tensor 'engine/fc.bias.master' (saved from another model or optimizer?)"));
}

}  // namespace checkpoint_kinds_test
