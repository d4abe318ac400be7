// A step saved again (a finished job run twice, a resume before the last save) replaces the old one
// without a moment where `latest` names nothing (hostile pass 14, S-1): the directories are swapped in
// one rename, and where a filesystem cannot swap, a load takes the old copy while the step is missing.
// A commit that fails rolls back, leaving the replaced step whole and no copy behind (M-1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/inspect.h"
#include "cohort/checkpoint.h"
#include "support/errors.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_replace_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using cohort::testing::Mlp;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/checkpoint_replace_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
};

// An Mlp whose weights come from `seed`, saved as `step`.
void save_model(const std::string& dir, int64_t step, int seed) {
  torch::manual_seed(seed);
  Mlp model;
  cohort::CheckpointState state;
  state.add("model", *model).rng(false).set_step(step);
  cohort::save_checkpoint(dir, state);
}

// The first weight of the model `dir` loads (a step directory, or a checkpoint directory's newest).
torch::Tensor loaded_weight(const std::string& dir) {
  Mlp model;
  cohort::CheckpointState state;
  state.add("model", *model).rng(false);
  EXPECT_TRUE(cohort::load_checkpoint(dir, state, cohort::LoadOptions().must_exist(true)).has_value());
  return model->parameters()[0].detach().clone();
}

torch::Tensor weight_of_seed(int seed) {
  torch::manual_seed(seed);
  Mlp model;
  return model->parameters()[0].detach().clone();
}

std::vector<std::string> hidden_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& item : fs::directory_iterator(dir)) {
    const std::string name = item.path().filename().string();
    if (name[0] == '.' && name != ".lock") out.push_back(name);
  }
  return out;
}

}  // namespace

TEST(CheckpointReplace, AStepSavedAgainHoldsTheNewStateAndNothingOfTheOld) {
  TempDir dir;
  save_model(dir.path, 10, 1);
  save_model(dir.path, 10, 2);
  EXPECT_TRUE(torch::equal(loaded_weight(dir.path), weight_of_seed(2)));
  EXPECT_TRUE(hidden_entries(dir.path).empty()) << ::testing::PrintToString(hidden_entries(dir.path));
}

TEST(CheckpointReplace, AFailedCommitLeavesTheReplacedStepWholeAndNoCopy) {
  TempDir dir;
  save_model(dir.path, 10, 1);
  // `latest` cannot be written (a directory stands in its way): the replacing save fails.
  fs::remove(dir.path + "/latest");
  fs::create_directory(dir.path + "/latest");
  const std::string error = cohort::testing::error_of([&] { save_model(dir.path, 10, 2); });
  EXPECT_THAT(error, HasSubstr("latest"));
  EXPECT_TRUE(torch::equal(loaded_weight(dir.path + "/step-10"), weight_of_seed(1)));
  EXPECT_TRUE(hidden_entries(dir.path).empty()) << ::testing::PrintToString(hidden_entries(dir.path));
  // A new step whose commit fails is not left in place either.
  cohort::testing::error_of([&] { save_model(dir.path, 20, 3); });
  EXPECT_FALSE(fs::exists(dir.path + "/step-20"));
  EXPECT_TRUE(hidden_entries(dir.path).empty()) << ::testing::PrintToString(hidden_entries(dir.path));
}

TEST(CheckpointReplace, AStepMissingBesideItsOldCopyLoadsTheCopyUntilANewerSave) {
  TempDir dir;
  save_model(dir.path, 10, 1);
  // What a filesystem without RENAME_EXCHANGE leaves when the saving rank dies between its renames.
  fs::rename(dir.path + "/step-10", dir.path + "/.step-10.old");
  ::testing::internal::CaptureStderr();
  const torch::Tensor weight = loaded_weight(dir.path);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("checkpoint " + dir.path + "/step-10 is missing (a save replacing it was interrupted): "
                        "loading its previous copy " + dir.path + "/.step-10.old"));
  EXPECT_TRUE(torch::equal(weight, weight_of_seed(1)));
  save_model(dir.path, 20, 2);  // `latest` names step-20: the copy goes at the next save
  EXPECT_TRUE(fs::exists(dir.path + "/.step-10.old"));
  save_model(dir.path, 30, 3);
  EXPECT_TRUE(hidden_entries(dir.path).empty()) << ::testing::PrintToString(hidden_entries(dir.path));
}

// Hostile pass 15, M-1: cohort-ckpt info, verify and consolidate take the checkpoint a load takes, the
// old copy of a missing step, instead of failing on `latest`.
TEST(CheckpointReplace, TheToolsTakeTheOldCopyOfAMissingStepAsALoadDoes) {
  TempDir dir;
  save_model(dir.path, 10, 1);
  fs::rename(dir.path + "/step-10", dir.path + "/.step-10.old");
  const std::string step = cohort::detail::ckpt::resolve_step_dir(dir.path);
  EXPECT_EQ(step, dir.path + "/.step-10.old");
  EXPECT_TRUE(cohort::detail::ckpt::verify_checkpoint(step).empty());
  // A link under the old copy's name is not the step's copy: `latest` is reported as it stands.
  fs::rename(dir.path + "/.step-10.old", dir.path + "/kept");
  fs::create_directory_symlink(dir.path + "/kept", dir.path + "/.step-10.old");
  EXPECT_EQ(cohort::detail::ckpt::resolve_step_dir(dir.path), dir.path + "/step-10");
}

TEST(CheckpointReplace, ASaveOfTheMissingStepThatFailsKeepsItsOldCopy) {
  TempDir dir;
  save_model(dir.path, 10, 1);
  fs::rename(dir.path + "/step-10", dir.path + "/.step-10.old");
  // Saving step 10 again, its commit failing (`latest` cannot be written): the copy stays, and loads.
  fs::remove(dir.path + "/latest");
  fs::create_directory(dir.path + "/latest");
  cohort::testing::error_of([&] { save_model(dir.path, 10, 2); });
  EXPECT_FALSE(fs::exists(dir.path + "/step-10"));
  EXPECT_TRUE(torch::equal(loaded_weight(dir.path + "/.step-10.old"), weight_of_seed(1)));
}

// Hostile pass 15, S-2: another step's checkpoint under the old copy's name is refused as a step-N
// directory of another step is, not loaded as step N's previous copy.
TEST(CheckpointReplace, AnotherStepUnderTheOldCopysNameIsRefused) {
  TempDir dir;
  save_model(dir.path, 15, 1);
  save_model(dir.path, 20, 2);
  fs::remove_all(dir.path + "/step-20");
  fs::rename(dir.path + "/step-15", dir.path + "/.step-20.old");
  Mlp model;
  cohort::CheckpointState state;
  state.add("model", *model).rng(false);
  EXPECT_THAT(cohort::testing::error_of([&] { cohort::load_checkpoint(dir.path, state); }),
              HasSubstr(".step-20.old/manifest.json: 'step' is 15, but its directory is step-20"));
}

}  // namespace checkpoint_replace_test
