// The Trainer's own values in a checkpoint's manifest ("user" values: the global batch, the callbacks'
// numbers): a hand edit is refused by their checksum (hostile pass 4, D4: an edited loss sum or batch
// was taken without a word); a malformed value under a matching checksum (an older manifest, a bug)
// must be refused in one line naming it, never crash the resume (trainer.step_batch "0" was a SIGFPE),
// run with a nonsense value ("-128" accumulated -2 batches) or leave a library's text ("stoll",
// "stod"). Hostile pass 3, D3.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cohort/trainer.h"
#include "support/errors.h"
#include "support/manifest_seal.h"
#include "support/multiproc.h"
#include "support/tiny_trainer_module.h"

namespace trainer_resume_values_test {

using ::testing::HasSubstr;
using namespace cohort::testing;

namespace {

struct TempDir {
  std::string path = std::filesystem::temp_directory_path() / ("trainer_resume_values_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

cohort::TrainerOptions quiet(const std::string& root) {
  return cohort::TrainerOptions().accelerator("cpu").default_root_dir(root).enable_progress_bar(false).logger(false);
}

// Trains 4 steps with an EarlyStopping and a monitoring ModelCheckpoint, so the checkpoint at step 4
// carries their values; returns its directory.
std::string save_one(const std::string& root) {
  cohort::Trainer trainer(quiet(root).max_epochs(2));
  trainer.add_callback(std::make_shared<cohort::EarlyStopping>(cohort::EarlyStoppingOptions().monitor("score")));
  trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
      cohort::ModelCheckpointOptions().monitor("score").mode("max").save_top_k(1)));
  ScriptedModule module({0.5, 0.6});
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
  cohort::DataLoader val(tiny_data(8), cohort::LoaderOptions().batch_size(8));
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  return root + "/checkpoints/step-4";
}

// Sets the manifest's user value `key` to `value` (the JSON text as the manifest writes it), and with
// `reseal` their checksum to match, as a manifest written with that value would carry.
void edit_user_value(const std::string& checkpoint, const std::string& key, const std::string& value,
                     bool reseal = true) {
  const std::string path = checkpoint + "/manifest.json";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string before = text.str();
  const std::regex entry("\"" + std::regex_replace(key, std::regex("\\."), "\\.") + "\"\\s*:\\s*\"[^\"]*\"");
  const std::string after = std::regex_replace(before, entry, "\"" + key + "\":\"" + value + "\"");
  ASSERT_NE(before, after) << "no user value " << key << " in " << path;
  nlohmann::json manifest = nlohmann::json::parse(after);
  if (reseal) cohort::testing::reseal_manifest(manifest);
  std::ofstream(path, std::ios::trunc) << manifest.dump(1);
}

std::string resume_error(const std::string& root, const std::string& checkpoint) {
  return error_of([&] {
    cohort::Trainer trainer(quiet(root + "-resume").max_epochs(3));
    trainer.add_callback(std::make_shared<cohort::EarlyStopping>(cohort::EarlyStoppingOptions().monitor("score")));
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().monitor("score").mode("max").save_top_k(1)));
    ScriptedModule module({0.5, 0.6, 0.7});
    cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
    cohort::DataLoader val(tiny_data(8), cohort::LoaderOptions().batch_size(8));
    trainer.fit(module, train, cohort::FitOptions().val(&val).ckpt_path(checkpoint));
  });
}

struct EditCase {
  const char* key;
  const char* value;
  const char* named;  // what the one line must say
};

class TrainerResumeValues : public ::testing::TestWithParam<EditCase> {};

TEST_P(TrainerResumeValues, AMalformedValueIsRefusedNamingIt) {
  TempDir dir;
  const std::string checkpoint = save_one(dir.path);
  edit_user_value(checkpoint, GetParam().key, GetParam().value);
  // trainer.step_batch is read when the world changed or a launcher restarted the job: here torchrun's
  // first restart of a world of one.
  const char* restart[][2] = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RESTART_COUNT", "1"}};
  for (const auto& [name, value] : restart) ::setenv(name, value, 1);
  const std::string error = resume_error(dir.path, checkpoint);
  for (const auto& [name, value] : restart) ::unsetenv(name);
  EXPECT_THAT(error, HasSubstr(GetParam().named));
  const std::string value = GetParam().value;
  EXPECT_THAT(error, HasSubstr("got " + value.substr(0, value.find(' '))));  // ModelCheckpoint.best: "score path"
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  std::filesystem::remove_all(dir.path + "-resume");
}

// Hostile pass 4, D4: a loss sum edited by hand changed the epoch's reported loss, an edited
// trainer.step_batch the samples per step, without a word; every such edit is now refused.
TEST(TrainerResumeValuesChecksum, AnEditedUserValueIsRefusedByItsChecksum) {
  TempDir dir;
  const std::string checkpoint = save_one(dir.path);
  edit_user_value(checkpoint, "trainer.step_batch", "4", false);
  const std::string error = resume_error(dir.path, checkpoint);
  EXPECT_THAT(error, HasSubstr("step-4/manifest.json: 'user_crc32' is "));
  EXPECT_THAT(error, HasSubstr(" but the values it covers give "));
  EXPECT_THAT(error, HasSubstr(": edited or damaged after the save"));
  std::filesystem::remove_all(dir.path + "-resume");
}

// Hostile pass 9, S3: the Trainer's values verified OK and failed the resume after "resumed from" (an
// epoch sums line "x y z"), some as a collective desync; now verify says BAD and the resume falls back.
TEST(TrainerResumeValuesCheck, DamagedEpochSumsAreBadAndTheResumeFallsBack) {
  TempDir dir;
  const std::string checkpoint = save_one(dir.path);
  const std::string root = dir.path + "/checkpoints";
  ASSERT_TRUE(std::filesystem::exists(root + "/step-2"));
  // Hostile pass 11, m-d: "1e15" and "500.5" samples read as 1 and 500 with the rest as the name; a
  // sum without samples resumed to a loss twice the real one.
  for (const char* damage : {"x y z", "1 nan 8 train_loss", "0 1.5 -5 train_loss", "1 839.45 1e15 train_loss",
                             "1 839.45 500.5 train_loss", "1 839.45 0 train_loss"}) {
    edit_user_value(checkpoint, "trainer.epoch_sums.0", damage);
    const ToolRun verify = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + checkpoint);
    EXPECT_EQ(verify.code, 1) << damage;
    EXPECT_THAT(verify.out, HasSubstr(checkpoint +
                                      "/manifest.json: 'user.trainer.epoch_sums.0': the epoch's logged "
                                      "values are damaged (line \"" +
                                      std::string(damage) + "\")"));
  }
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  cohort::Trainer trainer(quiet(dir.path + "-resume").max_epochs(3));
  ScriptedModule module({0.5, 0.6, 0.7});
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(8));
  EXPECT_NO_THROW(trainer.fit(module, train, cohort::FitOptions().ckpt_path(root)));
  const std::string out = ::testing::internal::GetCapturedStdout();
  ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, HasSubstr("resumed from " + root +
                             "/step-2 (step 2, saved by 1 rank(s)); newer checkpoints were "
                             "unusable"));
  std::filesystem::remove_all(dir.path + "-resume");
}

// Sets the sampler's saved `key` to `value` and reseals the manifest.
void edit_sampler_value(const std::string& checkpoint, const std::string& key, double value) {
  const std::string path = checkpoint + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(path));
  manifest["values"]["sampler"][key] = value;
  cohort::testing::reseal_manifest(manifest);
  std::ofstream(path, std::ios::trunc) << manifest.dump(1);
}

// Hostile pass 9, S2: the sampler's epoch or samples_in_epoch edited within its range verified OK and
// resumed to no training at all ("epoch 6/2") or replayed samples. Now each disagrees with the step
// through the Trainer's saved segment: verify says BAD, and the resume falls back to step-2, whose
// numbers (one mid-epoch, one at an epoch's end, accumulating 2 batches a step) verify OK.
TEST(TrainerResumeValuesCheck, ASamplerPositionThatDisagreesWithTheStepIsBad) {
  TempDir dir;
  const std::string root = dir.path + "/checkpoints";
  {  // 4 batches of 8 an epoch, 2 per step: steps 1 and 3 are mid-epoch, 2 and 4 at an epoch's end
    cohort::Trainer trainer(quiet(dir.path).max_steps(3).accumulate_grad_batches(2));
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().every_n_train_steps(1).save_top_k(-1)));
    ScriptedModule module({0.5, 0.6});
    cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(8));
    trainer.fit(module, train);
  }
  for (const char* step : {"step-2", "step-3"}) {
    const ToolRun verify = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + root + "/" + step);
    EXPECT_EQ(verify.code, 0) << step << ": " << verify.out;
  }
  const std::string checkpoint = root + "/step-3";  // epoch 1, 16 samples, segment (1, 2, 0)
  struct Edit {
    const char* key;
    double value;
    const char* named;
  };
  for (const Edit& edit :
       {Edit{"epoch", 5, "'values.sampler.epoch' is 5, but the Trainer's steps since step 2 are all of epoch 1"},
        Edit{"epoch", 0, "'values.sampler.epoch' is 0, but the Trainer's steps since step 2 are all of epoch 1"},
        Edit{"samples_in_epoch", 32,
             "'values.sampler.samples_in_epoch' is 32: 4 batch(es) of 8 samples since 0 at "
             "step 2 ('user.trainer.segment.*'), 2 optimizer step(s) of 2 batch(es), not "
             "the 1 up to the checkpoint's step 3"},
        Edit{"samples_in_epoch", 0, "'values.sampler.samples_in_epoch' is 0: 0 batch(es)"},
        Edit{"samples_in_epoch", 8,
             "'values.sampler.samples_in_epoch' is 8, 1 batch(es) of 8 samples: no optimizer "
             "step of 2 batch(es) in an epoch of 4 ('user.trainer.epoch_batches') ends there"},
        Edit{"samples_in_epoch", 40, "'values.sampler.samples_in_epoch' is 40, 5 batch(es) of 8 samples"},
        // Hostile pass 10, S2: within the batches of a step, but no whole batch.
        Edit{"samples_in_epoch", 13,
             "'values.sampler.samples_in_epoch' is 13: not 2 whole batch(es) of 8 samples "
             "('user.trainer.global_batch') before the epoch's last of 4"}}) {
    SCOPED_TRACE(std::string(edit.key) + " " + std::to_string(edit.value));
    std::filesystem::copy_file(checkpoint + "/manifest.json", dir.path + "/manifest.saved",
                               std::filesystem::copy_options::overwrite_existing);
    edit_sampler_value(checkpoint, edit.key, edit.value);
    const ToolRun verify = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + checkpoint);
    EXPECT_EQ(verify.code, 1);
    EXPECT_THAT(verify.out, HasSubstr(checkpoint + "/manifest.json: " + edit.named));
    if (edit.value == 5) {  // the resume falls back past it to step-2
      ::testing::internal::CaptureStdout();
      ::testing::internal::CaptureStderr();
      cohort::Trainer trainer(quiet(dir.path + "-resume").max_steps(4).accumulate_grad_batches(2));
      ScriptedModule module({0.5, 0.6});
      cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(8));
      EXPECT_NO_THROW(trainer.fit(module, train, cohort::FitOptions().ckpt_path(root)));
      const std::string out = ::testing::internal::GetCapturedStdout();
      const std::string err = ::testing::internal::GetCapturedStderr();
      EXPECT_THAT(out, HasSubstr("resumed from " + root + "/step-2 (step 2,"));
      EXPECT_THAT(err, HasSubstr(edit.named));
      EXPECT_EQ(trainer.global_step(), 4);
    }
    std::filesystem::copy_file(dir.path + "/manifest.saved", checkpoint + "/manifest.json",
                               std::filesystem::copy_options::overwrite_existing);
  }
  // Hostile pass 12, M-2: samples taken in epoch 1 before a stretch begun at step 1 (epoch 0's).
  edit_user_value(checkpoint, "trainer.segment.step", "1");
  edit_user_value(checkpoint, "trainer.segment.samples", "8");
  const ToolRun early = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + checkpoint);
  EXPECT_EQ(early.code, 1);
  EXPECT_THAT(early.out, HasSubstr("'user.trainer.segment.step' 1 and 'user.trainer.segment.samples' 8 in epoch 1: "
                                   "samples taken in this epoch need a step of it after one of each earlier epoch"));
  edit_user_value(checkpoint, "trainer.segment.samples", "0");
  // Hostile pass 10, M3: the segment's epoch began at a step no run reaches it by (each epoch takes one).
  edit_user_value(checkpoint, "trainer.segment.step", "0");
  const ToolRun verify = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + checkpoint);
  EXPECT_EQ(verify.code, 1);
  EXPECT_THAT(verify.out, HasSubstr("'user.trainer.segment.step' is out of range"));
  std::filesystem::remove_all(dir.path + "-resume");
}

// Hostile pass 11, M-d: a Trainer checkpoint's sampler entry deleted or emptied verified OK, and the
// resume stopped ("does not match this state") or fell back. M-f: epoch_batches lowered to the batches
// taken let any samples_in_epoch pass as the epoch's short last batch, and every later checkpoint was BAD.
TEST(TrainerResumeValuesCheck, ASamplerEntryAndTheEpochsLastBatchAreHeldToTheData) {
  TempDir dir;
  const std::string root = dir.path + "/checkpoints";
  {  // 30 samples in batches of 8: 4 batches an epoch, the last of 6
    cohort::Trainer trainer(quiet(dir.path).max_steps(4));
    trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
        cohort::ModelCheckpointOptions().every_n_train_steps(1).save_top_k(-1).keep_last(4)));
    ScriptedModule module({0.5});
    cohort::DataLoader train(tiny_data(30), cohort::LoaderOptions().batch_size(8));
    trainer.fit(module, train);
  }
  const ToolRun whole = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + root + "/step-4");
  EXPECT_EQ(whole.code, 0) << "the epoch's short last batch: " << whole.out;
  const std::string checkpoint = root + "/step-2", path = checkpoint + "/manifest.json";
  std::filesystem::copy_file(path, dir.path + "/manifest.saved");
  const auto edited = [&](const std::function<void(nlohmann::json&)>& change) {
    std::filesystem::copy_file(dir.path + "/manifest.saved", path, std::filesystem::copy_options::overwrite_existing);
    nlohmann::json manifest = nlohmann::json::parse(std::ifstream(path));
    change(manifest);
    cohort::testing::reseal_manifest(manifest);
    std::ofstream(path, std::ios::trunc) << manifest.dump(1);
    return run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + checkpoint);
  };
  const std::pair<std::function<void(nlohmann::json&)>, std::string> cases[] = {
      {[](nlohmann::json& j) { j["values"].erase("sampler"); },
       "'values' has no 'sampler': a Trainer checkpoint ('user.trainer.segment.*') saves its sampler's position"},
      {[](nlohmann::json& j) { j["values"]["sampler"] = nlohmann::json::object(); },
       "'values.sampler' has no 'epoch': a sampler saves epoch"},
      {[](nlohmann::json& j) {
         for (const char* key : {"epoch", "samples_in_epoch", "shuffle"}) j["values"]["sampler"].erase(key);
       },
       "'values.sampler' has no 'epoch'"},
      {[](nlohmann::json& j) {
         j["user"]["trainer.epoch_batches"] = "2";
         j["values"]["sampler"]["samples_in_epoch"] = 13;
       },
       "'values.sampler.samples_in_epoch' is 13: not 2 whole batch(es) of 8 samples ('user.trainer.global_batch'); "
       "the epoch's last may be short only when it takes all the data"},
      {[](nlohmann::json& j) { j["user"]["trainer.epoch_batches"] = "9"; },
       "'user.trainer.epoch_batches' is 9, more batches of 8 samples ('user.trainer.global_batch') than the "
       "sampler's dataset_size 30 makes (4)"},
      // Hostile pass 12, M-2: a stretch of epoch 0 begun at step 1 with no sample taken replayed a batch.
      {[](nlohmann::json& j) {
         j["user"]["trainer.segment.step"] = "1";
         j["values"]["sampler"]["samples_in_epoch"] = 24;
       },
       "'user.trainer.segment.step' 1 and 'user.trainer.segment.samples' 0 in epoch 0: no run has taken that many "
       "samples by that step"},
      {[](nlohmann::json& j) { j["user"]["trainer.segment.samples"] = "8"; },
       "'user.trainer.segment.step' 0 and 'user.trainer.segment.samples' 8 in epoch 0: no run has taken that many "
       "samples by that step"},
      // Hostile pass 13, M-1: the generators' states deleted resumed with other dropout masks.
      {[](nlohmann::json& j) {
         j["values"].erase("rng");
         auto& t = j["tensors"];
         t.erase(std::remove_if(t.begin(), t.end(), [](const nlohmann::json& r) { return r["name"] == "rng/cpu"; }),
                 t.end());
       },
       "there is no tensor 'rng/cpu': a Trainer checkpoint ('user.trainer.segment.*') saves each rank's generator "
       "state there"},
      // Hostile pass 13, S-5: the rate deleted resumed at the program's own.
      {[](nlohmann::json& j) { j["values"]["optimizer"].erase("g0.lr"); },
       "'values.optimizer' has 'g0.params' but no 'g0.lr': the optimizer saves each group's learning rate"}};
  for (const auto& [change, named] : cases) {
    const ToolRun verify = edited(change);
    EXPECT_EQ(verify.code, 1) << named;
    EXPECT_THAT(verify.out, HasSubstr(path + ": " + named));
  }
  edited(cases[0].first);  // deleted: damage to fall back from, as verify says, not another program
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  cohort::Trainer trainer(quiet(dir.path + "-resume").max_steps(4));
  trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(
      cohort::ModelCheckpointOptions().every_n_train_steps(1).save_top_k(-1)));
  ScriptedModule module({0.5});
  cohort::DataLoader train(tiny_data(30), cohort::LoaderOptions().batch_size(8));
  std::filesystem::remove_all(root + "/step-3");
  std::filesystem::remove_all(root + "/step-4");
  std::ofstream(root + "/latest", std::ios::trunc) << "step-2\n";
  EXPECT_NO_THROW(trainer.fit(module, train, cohort::FitOptions().ckpt_path(root)));
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, HasSubstr("resumed from " + root + "/step-1 (step 1,"));
  EXPECT_THAT(err, HasSubstr(cases[0].second));
  std::filesystem::remove_all(dir.path + "-resume");
}

// Diverges (its loss NaN) while its optimizer's rate is above 1, as a real model does at a rate of 1e6.
struct RateTrippedModule : TinyModule {
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> parameters) override {
    auto made = TinyModule::configure_optimizers(std::move(parameters));
    optimizer = made.get();
    return made;
  }
  torch::Tensor training_step(cohort::Batch& batch, int64_t index) override {
    const torch::Tensor loss = TinyModule::training_step(batch, index);
    return optimizer->param_groups().at(0).options().get_lr() > 1 ? loss * std::nan("") : loss;
  }
  torch::optim::Optimizer* optimizer = nullptr;
};

// Hostile pass 11, M-c: a checkpoint's rate within its bound that diverges stopped every resume on
// "lower the learning rate" while the program's own rate changed nothing: the message says the rate
// is the checkpoint's.
TEST(TrainerResumeValuesCheck, ADivergenceAfterAResumeSaysTheRateIsTheCheckpoints) {
  TempDir dir;
  const std::string root = dir.path + "/checkpoints";
  {
    cohort::Trainer trainer(quiet(dir.path).max_steps(2));
    RateTrippedModule module;
    cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(8));
    trainer.fit(module, train);
  }
  const std::string path = root + "/step-2/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(path));
  manifest["values"]["optimizer"]["g0.lr"] = 1e6;
  cohort::testing::reseal_manifest(manifest);
  std::ofstream(path, std::ios::trunc) << manifest.dump(1);
  const std::string error = error_of([&] {
    cohort::Trainer trainer(quiet(dir.path + "-resume").max_steps(4));
    RateTrippedModule module;
    cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(8));
    trainer.fit(module, train, cohort::FitOptions().ckpt_path(root));
  });
  EXPECT_THAT(error, HasSubstr("step 3: the training loss is nan; training stopped (the weights are no longer finite; "
                               "lower the learning rate, now 1000000, restored from " +
                               root + "/step-2 (a checkpoint's optimizer state, its rate included, replaces the "
                                      "program's: set the rate after the resume, or resume from an older checkpoint))"));
  std::filesystem::remove_all(dir.path + "-resume");
}

// Hostile pass 10, S5: without the count of ranks the epoch sums were skipped on rank 0 alone, and the
// resume failed after "resumed from" with map::at.
TEST(TrainerResumeValuesCheck, EpochSumsWithoutTheirCountOfRanksAreBad) {
  TempDir dir;
  const std::string checkpoint = save_one(dir.path);
  const std::string path = checkpoint + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(path));
  manifest["user"].erase("trainer.epoch_sums.ranks");
  cohort::testing::reseal_manifest(manifest);
  std::ofstream(path, std::ios::trunc) << manifest.dump(1);
  const ToolRun verify = run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + checkpoint);
  EXPECT_EQ(verify.code, 1);
  EXPECT_THAT(verify.out, HasSubstr(path + ": there is no 'user.trainer.epoch_sums.ranks' beside "
                                           "'user.trainer.epoch_sums.0': a Trainer saves how many ranks' epoch sums"));
}

INSTANTIATE_TEST_SUITE_P(
    Values, TrainerResumeValues,
    // Checked before anything loads (hostile pass 9, S3), naming the manifest.
    ::testing::Values(
        EditCase{"trainer.step_batch", "0", "step-4/manifest.json: 'user.trainer.step_batch' is out of range"},
        EditCase{"trainer.step_batch", "-128", "step-4/manifest.json: 'user.trainer.step_batch' is out of range"},
        EditCase{"trainer.step_batch", "abc", "step-4/manifest.json: 'user.trainer.step_batch' expects"},
        EditCase{"trainer.step_batch", "64x", "step-4/manifest.json: 'user.trainer.step_batch' expects"},
        EditCase{"trainer.global_batch", "1e300", "step-4/manifest.json: 'user.trainer.global_batch' expects"},
        EditCase{"trainer.epoch_sums.ranks", "2", "step-4/manifest.json: 'user.trainer.epoch_sums.ranks' is out"},
        EditCase{"EarlyStopping.best", "abc", "step-4/manifest.json: the checkpoint's EarlyStopping.best"},
        EditCase{"EarlyStopping.wait", "-1", "step-4/manifest.json: the checkpoint's EarlyStopping.wait"},
        EditCase{"ModelCheckpoint.saved_step", "1e300", "the checkpoint's ModelCheckpoint.saved_step"},
        EditCase{"ModelCheckpoint.best", "abc def", "step-4/manifest.json: the checkpoint's ModelCheckpoint.best"}),
    [](const ::testing::TestParamInfo<EditCase>& info) { return "case" + std::to_string(info.index); });

}  // namespace

}  // namespace trainer_resume_values_test
