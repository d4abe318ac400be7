// cohort::Trainer's Lightning options and module shapes in one process: limit_train_batches /
// limit_val_batches, the sanity check before training, fast_dev_run, max_time and a DataModule, each by
// the batches it runs and the state it leaves; every bad value named in one line; and a TrainingModule
// with its own layers (two-input forward, marked and policy units) trained under single and zero2 as the
// hand-written loop trains it, under bf16-mixed given its data in bfloat16, and refused by dp and pipeline.
// (fsdp/zero3 on 2 ranks: tests/multiproc/trainer_multiproc_test.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cohort/trainer.h"
#include "support/errors.h"
#include "support/tiny_trainer_module.h"
#include "trainer/options.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace trainer_lightning_test {

using namespace cohort::testing;
using O = cohort::TrainerOptions;

namespace {

std::string option_error(const O& options) {
  return error_of([&] { cohort::detail::resolve_options(options, false); });
}

struct TempDir {
  std::string path = std::filesystem::temp_directory_path() / ("trainer_lightning_" + std::to_string(::getpid()) + "_" +
                                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

O quiet() {
  return O().accelerator("cpu").enable_progress_bar(false).enable_checkpointing(false).logger(false);
}

// Writes down which step ran, in order: "t" training, "v" validation, "s" test.
struct CountingModule : TinyModule {
  torch::Tensor training_step(cohort::Batch& batch, int64_t index) override {
    calls += "t";
    return TinyModule::training_step(batch, index);
  }
  void validation_step(cohort::Batch& batch, int64_t index) override {
    calls += "v";
    TinyModule::validation_step(batch, index);
  }
  void test_step(cohort::Batch& batch, int64_t index) override { calls += "s"; }
  std::string calls;
};

struct ValidationEnds : cohort::Callback {
  void on_validation_end(cohort::Trainer& trainer, cohort::TrainingModule&) override { ++count; }
  void on_train_batch_end(cohort::Trainer& trainer, cohort::TrainingModule&, int64_t) override {
    if (trainer.global_step() == 1) val_loss_at_first_step = trainer.callback_metrics().count("val_loss") > 0;
  }
  int count = 0;
  bool val_loss_at_first_step = true;
};

TEST(TrainerLightningOptions, EveryBadValueIsNamed) {
  EXPECT_EQ(option_error(O().limit_train_batches(0)), "TrainerOptions.limit_train_batches \"0\" is not accepted: "
                                                      "expected a number of batches >= 1 or a fraction in (0, 1]");
  EXPECT_EQ(option_error(O().limit_train_batches(1.5)), "TrainerOptions.limit_train_batches \"1.5\" is not accepted: "
                                                        "expected a number of batches >= 1 or a fraction in (0, 1]");
  EXPECT_EQ(option_error(O().limit_val_batches(-1)), "TrainerOptions.limit_val_batches \"-1\" is not accepted: "
                                                     "expected a number of batches >= 0 or a fraction in [0, 1] (0: none)");
  EXPECT_EQ(option_error(O().num_sanity_val_steps(-2)), "TrainerOptions.num_sanity_val_steps \"-2\" is not accepted: "
                                                        "expected an integer >= 0, or -1 for the whole validation loader");
  EXPECT_EQ(option_error(O().fast_dev_run(-1)), "TrainerOptions.fast_dev_run \"-1\" is not accepted: expected true or "
                                                "a number of batches >= 1; false or 0: off");
  const std::string time = "\" is not accepted: expected \"DD:HH:MM:SS\" (e.g. \"00:12:00:00\") or a number of seconds > 0";
  EXPECT_EQ(option_error(O().max_time("1:02")), "TrainerOptions.max_time \"1:02" + time);
  EXPECT_EQ(option_error(O().max_time("00:00:00:00")), "TrainerOptions.max_time \"00:00:00:00" + time);
  EXPECT_EQ(option_error(O().max_time("an hour")), "TrainerOptions.max_time \"an hour" + time);
  EXPECT_EQ(option_error(O().max_time(0.0)), "TrainerOptions.max_time \"0" + time);
  EXPECT_EQ(option_error(O().activation_checkpointing(true)),
            "TrainerOptions.activation_checkpointing \"true\" is not accepted: expected false, its default unless "
            "strategy is fsdp or zero3 (strategy is \"auto\"); elsewhere call cohort::checkpoint in forward");
  EXPECT_EQ(option_error(O().strategy("zero2").reshard_after_forward(false)),
            "TrainerOptions.reshard_after_forward \"false\" is not accepted: expected true, its default unless strategy "
            "is fsdp or zero3 (strategy is \"zero2\")");
  EXPECT_EQ(error_of([] { cohort::detail::limited_batches(0.01, 10, "limit_val_batches"); }),
            "TrainerOptions.limit_val_batches 0.01 leaves no batch of the 10 this rank has per epoch: expected a "
            "fraction of at least 0.1, or a number of batches");
}

TEST(TrainerLightningOptions, ResolveAsLightningDoes) {
  auto resolved = [](const O& o) { return cohort::detail::resolve_options(o, false); };
  const auto fsdp = resolved(O().strategy("fsdp").activation_checkpointing(true));
  EXPECT_EQ(fsdp.zero_stage, 3);
  EXPECT_EQ(cohort::detail::strategy_name(fsdp), "fsdp");
  EXPECT_EQ(resolved(O().max_time("01:02:03:04")).max_time_seconds, 93784);
  EXPECT_EQ(resolved(O().max_time(90.5)).max_time_seconds, 90.5);
  const auto fast = resolved(O().fast_dev_run(true).max_epochs(7));
  EXPECT_EQ(fast.raw.max_steps(), 1);
  EXPECT_EQ(fast.raw.max_epochs(), 1);
  EXPECT_EQ(fast.raw.num_sanity_val_steps(), 0);
  EXPECT_FALSE(fast.raw.enable_checkpointing());
  EXPECT_EQ(cohort::detail::limited_batches(3, 8, "limit_train_batches"), 3);
  EXPECT_EQ(cohort::detail::limited_batches(20, 8, "limit_train_batches"), 8);
  EXPECT_EQ(cohort::detail::limited_batches(0.3, 8, "limit_train_batches"), 2);  // rounded down, as Lightning
  EXPECT_EQ(cohort::detail::limited_batches(1.0, 8, "limit_train_batches"), 8);
}

TEST(TrainerLightningOptions, LimitsAndTheSanityCheckRunTheBatchesTheySay) {
  cohort::Trainer trainer(quiet().max_epochs(2).limit_train_batches(3).limit_val_batches(0.25));
  auto ends = std::make_shared<ValidationEnds>();
  trainer.add_callback(ends);
  CountingModule module;
  cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(4));  // 8 batches
  cohort::DataLoader val(tiny_data(16), cohort::LoaderOptions().batch_size(2));    // 8 batches: 2 of them
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  EXPECT_EQ(module.calls, "vv" "tttvv" "tttvv");  // the sanity check first: 2 batches (num_sanity_val_steps)
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_EQ(trainer.num_training_batches(), 3);
  EXPECT_EQ(ends->count, 2);  // the sanity check is no validation for callbacks
  EXPECT_FALSE(ends->val_loss_at_first_step);  // nor are its metrics logged

  cohort::Trainer whole(quiet().max_steps(0).num_sanity_val_steps(-1).limit_val_batches(5));
  CountingModule checked;
  whole.fit(checked, train, cohort::FitOptions().val(&val));
  EXPECT_EQ(checked.calls, "vvvvv");  // -1: the whole (limited) loader

  cohort::Trainer none(quiet().max_epochs(1).limit_val_batches(0));
  CountingModule unvalidated;
  none.fit(unvalidated, train, cohort::FitOptions().val(&val));
  EXPECT_EQ(unvalidated.calls, "tttttttt");
}

TEST(TrainerLightningOptions, FastDevRunRunsNBatchesOfEachStageAndLeavesNoState) {
  TempDir dir;
  cohort::Trainer trainer(O().accelerator("cpu").enable_progress_bar(false).default_root_dir(dir.path).max_epochs(5)
                              .fast_dev_run(2));
  trainer.add_callback(std::make_shared<cohort::ModelCheckpoint>(cohort::ModelCheckpointOptions().every_n_train_steps(1)));
  CountingModule module;
  cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(4));
  cohort::DataLoader val(tiny_data(16), cohort::LoaderOptions().batch_size(2));
  trainer.fit(module, train, cohort::FitOptions().val(&val));
  trainer.test(module, val);
  EXPECT_EQ(module.calls, "ttvvss");
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_TRUE(trainer.loggers().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path)) << "fast_dev_run wrote checkpoints or logs";
}

TEST(TrainerLightningOptions, MaxTimeStopsAfterTheStepThatReachesItSavingTheLastCheckpoint) {
  TempDir dir;
  cohort::Trainer trainer(quiet().enable_checkpointing(true).default_root_dir(dir.path).max_epochs(3).max_time(1e-9));
  TinyModule module;
  cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(4));
  trainer.fit(module, train);
  EXPECT_EQ(trainer.global_step(), 1);
  EXPECT_TRUE(trainer.should_stop());
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/checkpoints/step-1/manifest.json"));
}

struct Digits : cohort::DataModule {
  void prepare_data() override { calls += "p"; }
  void setup(const std::string& stage) override { calls += "[" + stage + "]"; }
  std::shared_ptr<cohort::DataLoader> train_dataloader() override {
    return std::make_shared<cohort::DataLoader>(tiny_data(16), cohort::LoaderOptions().batch_size(4));
  }
  std::shared_ptr<cohort::DataLoader> val_dataloader() override {
    return std::make_shared<cohort::DataLoader>(tiny_data(8), cohort::LoaderOptions().batch_size(4));
  }
  std::string calls;
};

TEST(TrainerDataModule, FitValidateAndTestTakeTheirLoadersFromIt) {
  cohort::Trainer trainer(quiet().max_epochs(1).num_sanity_val_steps(0));
  CountingModule module;
  Digits data;
  trainer.fit(module, data);
  EXPECT_EQ(module.calls, "tttt" "vv");
  const auto metrics = trainer.validate(module, data);
  EXPECT_TRUE(metrics.count("val_loss"));
  EXPECT_EQ(data.calls, "p[fit]p[validate]");
  EXPECT_EQ(error_of([&] { trainer.test(module, data); }),
            "the DataModule's test_dataloader() returned no loader: override it to return one");
  cohort::DataLoader other(tiny_data(8), cohort::LoaderOptions().batch_size(4));
  EXPECT_EQ(error_of([&] { trainer.fit(module, data, cohort::FitOptions().val(&other)); }),
            "Trainer::fit with a DataModule: FitOptions.val is given too; the DataModule's val_dataloader() gives the "
            "validation data");
}

// ResidualModule trained by hand: batches of 4 in the sampler's shuffled order, Adam.
std::vector<torch::Tensor> residual_by_hand(int64_t epochs) {
  auto data = tiny_data(32);
  ResidualModule module;
  auto adam = module.configure_optimizers(module.parameters());
  cohort::DistributedSampler sampler(data->size(), cohort::SamplerOptions().shuffle(true).seed(0).num_replicas(1).rank(0));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    for (const auto& indices : sampler.batch_tensors(4)) {
      const cohort::Batch b = data->get_batch(indices);
      adam->zero_grad();
      torch::nn::functional::cross_entropy(module.logits(b.data), b.target).backward();
      adam->step();
    }
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(TrainerAnyModule, AModuleWithItsOwnLayersTrainsAsTheHandWrittenLoop) {
  const auto expected = residual_by_hand(2);
  for (const std::string strategy : {"single", "zero2"}) {
    cohort::Trainer trainer(quiet().strategy(strategy).max_epochs(2));
    ResidualModule module;
    cohort::DataLoader train(tiny_data(32), cohort::LoaderOptions().batch_size(4).shuffle(true));
    trainer.fit(module, train);
    const auto trained = trainer.full_parameters();
    ASSERT_EQ(trained.size(), expected.size());
    for (size_t i = 0; i < trained.size(); ++i)
      EXPECT_TRUE(torch::allclose(trained[i].second, expected[i], 1e-6, 1e-6)) << strategy << ": " << trained[i].first;
  }
}

TEST(TrainerAnyModule, UnderBf16MixedZeroItsStepsGetTheDataInBfloat16) {
  struct Recording : ResidualModule {
    torch::Tensor training_step(cohort::Batch& batch, int64_t index) override {
      dtypes.push_back(batch.data.scalar_type());
      return ResidualModule::training_step(batch, index);
    }
    std::vector<torch::Dtype> dtypes;
  };
  cohort::Trainer trainer(quiet().strategy("zero2").precision("bf16-mixed").max_steps(2));
  Recording module;
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(4));
  trainer.fit(module, train);
  EXPECT_EQ(module.dtypes, (std::vector<torch::Dtype>{torch::kBFloat16, torch::kBFloat16}));
}

TEST(TrainerAnyModule, StrategiesThatNeedASequentialRefuseIt) {
  cohort::DataLoader train(tiny_data(16), cohort::LoaderOptions().batch_size(4));
  EXPECT_EQ(error_of([&] {
              cohort::Trainer trainer(quiet().strategy("dp").devices(2));
              ResidualModule module;
              trainer.fit(module, train);
            }),
            "strategy \"dp\" copies a torch::nn::Sequential network once per device, but this TrainingModule has its "
            "own layers (made with TrainingModule()): use strategy ddp with devices 2, or give the module a Sequential");
  EXPECT_EQ(error_of([&] {
              cohort::Trainer trainer(quiet().strategy("pipeline"));
              ResidualModule module;
              trainer.fit(module, train);
            }),
            "strategy \"pipeline\" cuts a torch::nn::Sequential into stages, but this TrainingModule has its own "
            "layers and its pipeline_layers() gives none: give it a Sequential, override pipeline_layers() "
            "(models/gpt_pipeline.h does it for the GPT), or use strategy ddp or fsdp");
  ResidualModule module;
  EXPECT_EQ(error_of([&] { module.network(); }), "TrainingModule::network(): this module has its own layers (made "
                                                 "with TrainingModule()), not a torch::nn::Sequential network");
  cohort::TrainingModule& base = module;
  EXPECT_EQ(error_of([&] { base.forward(torch::ones({1, 6})); }),
            "TrainingModule::forward: this module has its own layers (made with TrainingModule()): override forward, or "
            "define one with your inputs, and call it from training_step");
}

}  // namespace
}  // namespace trainer_lightning_test
