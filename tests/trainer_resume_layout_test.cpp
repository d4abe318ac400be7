// A Trainer checkpoint resumed where the data splits into other batches (a launcher's restart at another
// world size keeps the samples per step by accumulating): the saved position's epoch is the saving
// run's. Hostile pass 12, M-3: saved at the last step of an epoch whose tail drop_last dropped, the
// resume in another layout found one more batch of that epoch and trained it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cohort/trainer.h"
#include "support/tiny_trainer_module.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace trainer_resume_layout_test {

using namespace cohort::testing;

struct TempDir {
  std::string path = std::filesystem::temp_directory_path() / ("trainer_resume_layout_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

cohort::TrainerOptions quiet(const std::string& root, int64_t max_steps) {
  return cohort::TrainerOptions()
      .accelerator("cpu")
      .default_root_dir(root)
      .enable_progress_bar(false)
      .logger(false)
      .max_steps(max_steps);
}

nlohmann::json manifest_of(const std::string& step_dir) {
  return nlohmann::json::parse(std::ifstream(step_dir + "/manifest.json"));
}

TEST(TrainerResumeLayout, AnEpochSavedAtItsLastBatchIsOverInAnotherLayout) {
  TempDir dir;
  const std::string root = dir.path + "/checkpoints";
  {  // 30 samples, batches of 8 with drop_last: 3 batches (24 samples) an epoch
    cohort::Trainer trainer(quiet(dir.path, 3));
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().every_n_train_steps(1).save_top_k(-1)));
    TinyModule module;
    cohort::DataLoader train(tiny_data(30), cohort::LoaderOptions().batch_size(8).drop_last(true));
    trainer.fit(module, train);
  }
  EXPECT_EQ(manifest_of(root + "/step-3")["values"]["sampler"]["samples_in_epoch"], 24);
  // A launcher's restart in batches of 4 (7 of them, 28 samples, by drop_last), 2 accumulated a step.
  const char* restart[][2] = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "1"}};
  for (const auto& [name, value] : restart) ::setenv(name, value, 1);
  {
    cohort::Trainer trainer(quiet(dir.path + "/resumed", 4));
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().dirpath(root).every_n_train_steps(1).save_top_k(-1)));
    TinyModule module;
    cohort::DataLoader train(tiny_data(30), cohort::LoaderOptions().batch_size(4).drop_last(true));
    trainer.fit(module, train, cohort::FitOptions().ckpt_path(root + "/step-3"));
    EXPECT_EQ(trainer.current_epoch(), 1);
  }
  for (const auto& [name, value] : restart) ::unsetenv(name);
  // Step 4 is epoch 1's first (8 samples of it), not a fourth step of epoch 0.
  const nlohmann::json sampler = manifest_of(root + "/step-4")["values"]["sampler"];
  EXPECT_EQ(sampler["epoch"], 1);
  EXPECT_EQ(sampler["samples_in_epoch"], 8);
}

// Hostile pass 12, m-4: resumed without the accumulation it was saved with, a run took half the samples
// per step without a word; it is the run's choice (Lightning's too), said in one line.
TEST(TrainerResumeLayout, AnotherAccumulationIsSaid) {
  TempDir dir;
  const std::string root = dir.path + "/checkpoints";
  {
    cohort::Trainer trainer(quiet(dir.path, 2).accumulate_grad_batches(2));
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().every_n_train_steps(1).save_top_k(-1)));
    TinyModule module;
    cohort::DataLoader train(tiny_data(64), cohort::LoaderOptions().batch_size(8));
    trainer.fit(module, train);
  }
  cohort::Trainer trainer(quiet(dir.path + "/resumed", 3));
  TinyModule module;
  cohort::DataLoader train(tiny_data(64), cohort::LoaderOptions().batch_size(8));
  ::testing::internal::CaptureStdout();
  trainer.fit(module, train, cohort::FitOptions().ckpt_path(root + "/step-2"));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, ::testing::HasSubstr("the checkpoint " + root +
                                        "/step-2 took 16 samples per optimizer step, this run takes 8 (1 accumulated "
                                        "batch(es) of 8): the rate of learning per sample changes\n"));
}

}  // namespace trainer_resume_layout_test
