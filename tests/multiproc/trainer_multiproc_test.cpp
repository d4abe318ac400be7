// cohort::Trainer on real rank processes: on 2 ranks in fp32 a Trainer run ends with exactly the
// parameters of the hand-written loop with the same seed and data order (ddp, zero2, zero3); a module
// with its own layers and a two-input forward trains under ddp and fsdp (marked and policy units, with
// and without resharding and recomputation) as one process on the same global batches; a fit
// stopped by max_steps at any point a save lands on and resumed with ckpt_path "last" ends where an
// uninterrupted one does, its epoch losses included; and a
// program started without a launcher with devices 2 starts its second worker itself, prefixes its
// output and, when that worker dies, fails naming it with no process left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "cohort/ddp.h"
#include "cohort/trainer.h"
#include "cohort/zero.h"
#include "launch_helpers.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "support/tiny_trainer_module.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace trainer_multiproc_test {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace cohort::testing;

namespace {

constexpr int64_t kBatch = 4, kEpochs = 2;  // 64 samples over 2 ranks: 8 steps per epoch

cohort::TrainerOptions quiet(const std::string& strategy) {
  return cohort::TrainerOptions()
      .strategy(strategy)
      .accelerator("cpu")
      .max_epochs(kEpochs)
      .enable_progress_bar(false)
      .enable_checkpointing(false)
      .logger(false);
}

// The loop a user writes by hand: sampler, DDP or the ZeRO engine, Adam.
std::vector<torch::Tensor> hand_written(const std::string& strategy) {
  auto data = tiny_data();
  auto net = tiny_network();
  cohort::DistributedSampler sampler(data->size(), cohort::SamplerOptions().shuffle(true).seed(0));
  auto adam = [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
  };
  auto train = [&](auto&& step) {
    for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
      sampler.set_epoch(epoch);
      for (const auto& batch : sampler.batch_tensors(kBatch)) step(data->get_batch(batch));
    }
  };
  std::vector<torch::Tensor> out;
  if (strategy == "ddp") {
    cohort::DistributedDataParallel ddp(net);
    auto opt = adam(net->parameters());
    train([&](const cohort::Batch& b) {
      opt->zero_grad();
      torch::nn::functional::cross_entropy(ddp(b.data), b.target).backward();
      opt->step();
    });
    for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
    return out;
  }
  const int stage = strategy.back() - '0';
  auto config = cohort::ZeroConfig().world_size(2).zero_optimization(
      cohort::ZeroOptimizationConfig().stage(stage).overlap_comm(stage >= 3));
  auto engine = cohort::initialize(config, net, cohort::EngineOptions().optimizer_factory(adam));
  train([&](const cohort::Batch& b) {
    engine.backward(torch::nn::functional::cross_entropy(engine.forward(b.data), b.target));
    engine.step();
  });
  for (const auto& [name, value] : engine.full_parameters()) out.push_back(value.clone());
  return out;
}

// `seed` makes the module's initial weights: a resumed fit must replace them with the checkpoint's.
std::vector<torch::Tensor> with_trainer(cohort::TrainerOptions options, const std::string& ckpt_path = "",
                                        std::shared_ptr<cohort::Callback> callback = nullptr, int64_t seed = 7) {
  cohort::Trainer trainer(options);
  if (callback) trainer.add_callback(callback);
  TinyModule module(seed);
  cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch).shuffle(true).num_workers(2));
  trainer.fit(module, loader, cohort::FitOptions().ckpt_path(ckpt_path));
  std::vector<torch::Tensor> out;
  for (const auto& [name, value] : trainer.full_parameters()) out.push_back(value);
  return out;
}

void expect_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i].to(torch::kFloat), b[i].to(torch::kFloat)))
        << what << ": parameter " << i << " differs";
}

TEST(TrainerMultiproc, SameParametersAsTheHandWrittenLoop) {
  run_ranks(2, [](int, int) {
    cohort::init();
    for (const std::string strategy : {"ddp", "zero2", "zero3"})
      expect_same(hand_written(strategy), with_trainer(quiet(strategy)), strategy);
  });
}

// Calls step(batch) on the global batches `shares` data shares read together, kEpochs epochs: step
// k's batch is every share's k-th batch of kBatch (the DistributedSampler of that share), concatenated.
void over_global_batches(int shares, int64_t batch, const std::function<void(const cohort::Batch&)>& step) {
  auto data = tiny_data();
  std::vector<cohort::DistributedSampler> samplers;
  for (int r = 0; r < shares; ++r)
    samplers.emplace_back(data->size(), cohort::SamplerOptions().num_replicas(shares).rank(r).shuffle(true).seed(0));
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    std::vector<std::vector<torch::Tensor>> batches;
    for (auto& sampler : samplers) {
      sampler.set_epoch(epoch);
      batches.push_back(sampler.batch_tensors(batch));
    }
    for (size_t k = 0; k < batches[0].size(); ++k) {
      std::vector<torch::Tensor> parts;
      for (const auto& share : batches) parts.push_back(share[k]);
      step(data->get_batch(torch::cat(parts)));
    }
  }
}

// ResidualModule in one process over the global batches of `shares` ranks, Adam: what the ranks must
// end with.
std::vector<std::pair<std::string, torch::Tensor>> residual_one_process(int shares) {
  ResidualModule module;
  auto adam = module.configure_optimizers(module.parameters());
  over_global_batches(shares, kBatch, [&](const cohort::Batch& b) {
    adam->zero_grad();
    torch::nn::functional::cross_entropy(module.logits(b.data), b.target).backward();
    adam->step();
  });
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value().detach().clone());
  return out;
}

TEST(TrainerMultiproc, AModuleWithItsOwnLayersTrainsAsOneProcessUnderDdpAndFsdp) {
  run_ranks(2, [](int, int) {
    cohort::init();
    const auto expected = residual_one_process(2);
    for (const auto& options :
         {quiet("ddp"), quiet("fsdp"), quiet("zero3").reshard_after_forward(false).activation_checkpointing(true)}) {
      cohort::Trainer trainer(options);
      ResidualModule module;
      cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch).shuffle(true));
      trainer.fit(module, loader);
      const auto trained = trainer.full_parameters();  // ZeRO stage 3 lists them unit by unit
      ASSERT_EQ(trained.size(), expected.size());
      for (const auto& [name, value] : trained) {
        const auto same = std::find_if(expected.begin(), expected.end(),
                                       [&](const auto& e) { return e.first == name; });
        ASSERT_NE(same, expected.end()) << trainer.describe() << ": " << name;
        EXPECT_TRUE(torch::allclose(value, same->second, 1e-5, 1e-5))
            << trainer.describe() << ": " << name << " differs by "
            << (value - same->second).abs().max().item<double>();
      }
    }
  });
}

// Layers made in configure_model: under fsdp inside a ShardedInit (the marked block is sharded as it
// is made, so it has no elements after), under ddp whole; both train as one process.
TEST(TrainerMultiproc, LayersMadeInConfigureModelAreShardedAsMadeUnderFsdp) {
  run_ranks(2, [](int, int) {
    cohort::init();
    const auto expected = residual_one_process(2);
    torch::manual_seed(11);
    const auto input = torch::randn({5, 6});
    torch::Tensor ddp_output;
    for (const std::string strategy : {"ddp", "fsdp"}) {
      cohort::Trainer trainer(quiet(strategy));
      ResidualModule module(7, /*in_configure_model=*/true);
      EXPECT_TRUE(module.parameters().empty());
      cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch).shuffle(true));
      trainer.fit(module, loader);
      EXPECT_EQ(module.block_elements_made, strategy == "fsdp" ? 0 : 8 * 8 * 2 + 8 * 2) << strategy;
      // A forward outside fit (Trainer::run_forward): under fsdp the units gather for it and free after.
      const auto output = trainer.run_forward([&] { return module.logits(input); });
      EXPECT_FALSE(output.requires_grad()) << strategy;
      if (strategy == "ddp") ddp_output = output;
      else EXPECT_TRUE(torch::allclose(output, ddp_output, 1e-5, 1e-6)) << (output - ddp_output).abs().max();
      if (strategy == "fsdp") EXPECT_EQ(trainer.memory_report().buffer_bytes, 0) << "a unit stayed gathered";
      const auto trained = trainer.full_parameters();
      ASSERT_EQ(trained.size(), expected.size()) << strategy;
      for (const auto& [name, value] : trained) {
        const auto same = std::find_if(expected.begin(), expected.end(),
                                       [&](const auto& e) { return e.first == name; });
        ASSERT_NE(same, expected.end()) << strategy << ": " << name;
        EXPECT_TRUE(torch::allclose(value, same->second, 1e-5, 1e-5)) << strategy << ": " << name;
      }
    }
  });
}

// Each epoch's training loss as the end-of-epoch callbacks see it, by the epoch just finished (under
// pipeline the last stage computes the loss with TrainingModule::loss, and nothing is logged).
struct EpochLosses : cohort::Callback {
  void on_train_epoch_end(cohort::Trainer& trainer, cohort::TrainingModule&) override {
    const auto& metrics = trainer.callback_metrics();
    if (const auto found = metrics.find("train_loss_epoch"); found != metrics.end())
      losses[trainer.current_epoch()] = found->second;
  }
  std::map<int64_t, double> losses;
};

// Issue 39: a fit resumes from every point a save lands on: mid-epoch, the last step of an epoch (saved
// before the epoch's end ran), the last step of the run, and with accumulation; the resumed fit ends at
// the uninterrupted fit's parameters and its end-of-epoch callbacks see the same epoch losses (the
// checkpoint carries the epoch's logged sums).
TEST(TrainerMultiproc, ResumeFromEveryPointASaveLandsOnEqualsAnUninterruptedFit) {
  RanksOptions options;
  const std::string dir = cohort::testing::shared_temp_dir(options, "TRAINER_TEST_DIR", "trainer_resume_");
  run_ranks(
      2,
      [](int, int) {
        cohort::init();
        struct Case {
          std::string strategy;
          int64_t accumulate, stop;
        };
        // ddp and fsdp: 64 samples over 2 ranks in batches of 4, 8 batches per epoch; pipeline: every rank
        // reads all 64, 16 per epoch. Two epochs.
        const std::vector<Case> cases = {{"ddp", 1, 11},      {"ddp", 1, 8},       {"ddp", 1, 16},     {"ddp", 2, 4},
                                         {"ddp", 2, 6},       {"fsdp", 1, 8},      {"fsdp", 1, 11},    {"fsdp", 1, 16},
                                         {"pipeline", 1, 21}, {"pipeline", 1, 16}, {"pipeline", 1, 32}};
        std::map<std::pair<std::string, int64_t>, std::pair<std::vector<torch::Tensor>, std::map<int64_t, double>>>
            straight;
        for (const Case& c : cases) {
          const std::string what = c.strategy + " x" + std::to_string(c.accumulate) + " stopped at step " +
                                   std::to_string(c.stop);
          const auto base = quiet(c.strategy).accumulate_grad_batches(c.accumulate);
          auto& reference = straight[{c.strategy, c.accumulate}];
          if (reference.first.empty()) {
            auto losses = std::make_shared<EpochLosses>();
            reference.first = with_trainer(base, "", losses);
            reference.second = losses->losses;
          }
          const std::string root = std::string(std::getenv("TRAINER_TEST_DIR")) + "/" + c.strategy + "_" +
                                   std::to_string(c.accumulate) + "_" + std::to_string(c.stop);
          auto checkpoint = [&] {
            return std::make_shared<cohort::ModelCheckpoint>(
                cohort::ModelCheckpointOptions().dirpath(root).every_n_train_steps(1));
          };
          with_trainer(cohort::TrainerOptions(base).max_steps(c.stop), "", checkpoint());
          ASSERT_TRUE(std::filesystem::exists(root + "/step-" + std::to_string(c.stop) + "/manifest.json")) << what;
          auto losses = std::make_shared<EpochLosses>();
          cohort::Trainer trainer(base);
          trainer.add_callback(checkpoint());
          trainer.add_callback(losses);
          TinyModule module(/*seed=*/99);
          cohort::DataLoader loader(tiny_data(),
                                    cohort::LoaderOptions().batch_size(kBatch).shuffle(true).num_workers(2));
          trainer.fit(module, loader, cohort::FitOptions().ckpt_path("last"));
          std::vector<torch::Tensor> resumed;
          for (const auto& [name, value] : trainer.full_parameters()) resumed.push_back(value);
          expect_same(reference.first, resumed, what);
          EXPECT_EQ(trainer.current_epoch(), kEpochs) << what;
          if (c.strategy == "pipeline") continue;
          // The resumed fit ends the epoch the checkpoint is in (saved at its last step: before its end ran)
          // and every later one, each with the uninterrupted fit's mean over all of the epoch's batches.
          const int64_t per_epoch = 8 / c.accumulate, first_ended = (c.stop - 1) / per_epoch + 1;
          for (int64_t epoch = first_ended; epoch <= kEpochs; ++epoch) {
            const auto found = losses->losses.find(epoch);
            ASSERT_NE(found, losses->losses.end()) << what << ": epoch " << epoch << " ended without its loss";
            EXPECT_DOUBLE_EQ(found->second, reference.second.at(epoch)) << what << ", epoch " << epoch;
          }
        }
      },
      options);
  remove_tree(dir);
}

// One process over the batches `shares` pipelines read together (over_global_batches, batches of
// `batch` per share), one Adam step on each, the gradient's norm clipped to `clip` (0: not clipped).
torch::nn::Sequential one_process(int shares, double clip, int64_t batch) {
  auto net = tiny_network();
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
  over_global_batches(shares, batch, [&](const cohort::Batch& b) {
    adam.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(b.data), b.target).backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(net->parameters(), clip);
    adam.step();
  });
  return net;
}

// Pipelined: the same weights as one process (within float rounding: microbatches sum in another
// order), and the same validation loss over the whole data.
void expect_pipeline_trains_as_one_process(cohort::TrainerOptions options, int shares, int64_t batch = kBatch) {
  auto reference = one_process(shares, options.gradient_clip_val(), batch);
  cohort::Trainer trainer(options);
  TinyModule module;
  cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(batch).shuffle(true));
  trainer.fit(module, loader);
  const auto trained = trainer.full_parameters();
  const auto expected = reference->named_parameters();
  ASSERT_EQ(trained.size(), expected.size());
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_EQ(trained[i].first, expected[i].key());
    EXPECT_TRUE(torch::allclose(trained[i].second, expected[i].value(), 1e-5, 1e-6))
        << trained[i].first << " differs by " << (trained[i].second - expected[i].value()).abs().max().item<double>();
  }
  cohort::DataLoader all(tiny_data(), cohort::LoaderOptions().batch_size(16));
  const auto metrics = trainer.validate(module, all);
  torch::NoGradGuard no_grad;
  const auto whole = tiny_data()->get_batch(torch::arange(64));
  const double expected_loss =
      torch::nn::functional::cross_entropy(reference->forward(whole.data), whole.target).item<double>();
  EXPECT_NEAR(metrics.at("val_loss"), expected_loss, 1e-5);
}

TEST(TrainerPipeline, TwoStagesTrainAsOneProcess) {
  run_ranks(2, [](int, int) {
    cohort::init();
    expect_pipeline_trains_as_one_process(quiet("pipeline"), 1);
    expect_pipeline_trains_as_one_process(
        quiet("pipeline").pipeline_schedule("gpipe").pipeline_chunks(3).gradient_clip_val(0.05), 1);
  });
}

// Batches of 7 from 64 samples: each epoch ends with a batch of 1 row for 4 microbatches, which
// used to fail ("a batch of 1 rows cannot be split into 4 microbatches"); its empty microbatches
// now add nothing, and the fit ends where one process does.
TEST(TrainerPipeline, AShortLastBatchTrainsAsOneProcess) {
  run_ranks(2, [](int, int) {
    cohort::init();
    expect_pipeline_trains_as_one_process(quiet("pipeline").pipeline_chunks(4), 1, 7);
  });
}

// 4 ranks, pipeline_stages 2: two pipelines of two stages, each reading half the data; each stage's
// two replicas under DDP, ZeRO-1 or FSDP (pipeline_zero_stage 3). FSDP per stage resumes from its
// checkpoint (the engines' state by parameter) to the uninterrupted fit's weights.
TEST(TrainerPipeline, TwoPipelinesOfTwoStagesTrainAsOneProcessOnTheirUnion) {
  RanksOptions options;
  const std::string dir = cohort::testing::shared_temp_dir(options, "TRAINER_TEST_DIR", "trainer_pipeline_zero_");
  run_ranks(
      4,
      [](int, int) {
        cohort::init();
        for (int64_t zero : {0, 1, 3})
          expect_pipeline_trains_as_one_process(quiet("pipeline").pipeline_stages(2).pipeline_zero_stage(zero), 2);
        const auto fsdp = quiet("pipeline").pipeline_stages(2).pipeline_zero_stage(3);
        const std::string root = std::string(std::getenv("TRAINER_TEST_DIR")) + "/ckpt";
        auto checkpoint = [&] {
          return std::make_shared<cohort::ModelCheckpoint>(
              cohort::ModelCheckpointOptions().dirpath(root).every_n_train_steps(1));
        };
        const auto straight = with_trainer(fsdp);
        with_trainer(cohort::TrainerOptions(fsdp).max_steps(5), "", checkpoint());
        expect_same(straight, with_trainer(fsdp, "last", checkpoint()), "FSDP per stage resumed at step 5");
        std::string latest;
        std::getline(std::ifstream(root + "/latest") >> std::ws, latest);
        std::stringstream manifest;
        manifest << std::ifstream(root + "/" + latest + "/manifest.json").rdbuf();
        EXPECT_THAT(manifest.str(), HasSubstr("\"engine/0.weight.master\""));  // the engines' state by parameter
        cohort::Trainer trainer(cohort::TrainerOptions(fsdp).max_steps(1));
        TinyModule module;
        cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch));
        trainer.fit(module, loader);
        EXPECT_THAT(trainer.describe(), HasSubstr("FSDP per stage"));
      },
      options);
  remove_tree(dir);
}

TEST(TrainerPipeline, AModuleWithoutLossStagesNotDividingTheWorldAndAForwardOutsideFitAreNamed) {
  run_ranks(2, [](int, int) {
    cohort::init();
    struct WithoutLoss : cohort::TrainingModule {
      WithoutLoss() : TrainingModule(tiny_network()) {}
      torch::Tensor training_step(cohort::Batch& batch, int64_t) override {
        return torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
      }
      std::unique_ptr<torch::optim::Optimizer> configure_optimizers(std::vector<torch::Tensor> p) override {
        return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
      }
    };
    cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch));
    EXPECT_THAT(error_of([&] {
                  cohort::Trainer trainer(quiet("pipeline").pipeline_stages(3));
                  TinyModule module;
                  trainer.fit(module, loader);
                }),
                HasSubstr("TrainerOptions.pipeline_stages 3 does not divide the 2 ranks: the world is (ranks / "
                          "stages) pipelines of one rank per stage"));
    EXPECT_THAT(error_of([&] {
                  cohort::Trainer trainer(quiet("pipeline").pipeline_zero_stage(3));
                  TinyModule module;
                  trainer.fit(module, loader);
                }),
                HasSubstr("TrainerOptions.pipeline_zero_stage 3 shards each stage over its replicas, but the world's "
                          "2 rank(s) are 2 stage(s) of one pipeline: set pipeline_stages so that it divides the world "
                          "at least twice"));
    // Before the failed fit below: its failure aborts the world's Comm for what follows.
    {
      cohort::Trainer trainer(quiet("pipeline"));
      TinyModule module;
      trainer.fit(module, loader);
      bool ran = false;
      EXPECT_THAT(error_of([&] {
                    trainer.run_forward([&] {
                      ran = true;
                      return torch::Tensor();
                    });
                  }),
                  HasSubstr("Trainer::run_forward: strategy \"pipeline\" holds one stage of the model on each rank, so "
                            "the module's layers cannot run whole on one; evaluate through Trainer::validate or "
                            "Trainer::test"));
      EXPECT_FALSE(ran);
    }
    const std::string missing = error_of([&] {
      cohort::Trainer trainer(quiet("pipeline"));
      WithoutLoss module;
      trainer.fit(module, loader);
    });
    EXPECT_THAT(missing, HasSubstr("strategy \"pipeline\" computes each microbatch's loss on the last stage: "
                                   "override TrainingModule::loss(output, target)"));
  });
}

// Rank 1 stops itself (SIGSTOP) as a debugger's halt or Ctrl-Z would; a SIGTERM it gets once
// continued says so. The time of the stop goes to <dir>/stopped.
void stop_self() {
  std::signal(SIGTERM, [](int) {
    const char line[] = "rank 1 got SIGTERM after SIGSTOP\n";
    (void)!::write(2, line, sizeof line - 1);
    ::_exit(143);
  });
  std::ofstream(std::string(std::getenv("TRAINER_TEST_DIR")) + "/stopped")
      << std::chrono::steady_clock::now().time_since_epoch().count();
  ::raise(SIGSTOP);
}

// The program of the self-launch tests: run as a plain process (no launcher variables), it asks for
// devices 2 and so becomes rank 0 of a job whose rank 1 it starts itself, with these same arguments.
TEST(TrainerSelfLaunch, DISABLED_Program) {
  const std::string dir = std::getenv("TRAINER_TEST_DIR");
  const char* rank_variable = std::getenv("RANK");  // set for the worker this program starts
  if (std::getenv("TRAINER_DIE_BEFORE_INIT") && rank_variable && std::string(rank_variable) == "1") {
    std::fprintf(stderr, "error: rank 1 ended before joining\n");
    std::_Exit(5);
  }
  cohort::Trainer trainer(quiet("ddp").devices(2).max_epochs(1));
  const int rank = trainer.world().rank();
  std::ofstream(dir + "/" + std::to_string(rank) + ".pid") << ::getpid();
  struct Failing : TinyModule {
    torch::Tensor training_step(cohort::Batch& batch, int64_t index) override {
      if (std::getenv("TRAINER_FAIL") && current_epoch() == 0 && index == 3 && rank_ == 1) {
        std::fprintf(stderr, "error: rank 1 broke on purpose\n");
        std::_Exit(3);
      }
      if (std::getenv("TRAINER_STOP") && current_epoch() == 0 && index == 3 && rank_ == 1) stop_self();
      // An error of its own that unwinds this rank (its Comm then leaves with a clean goodbye).
      if (std::getenv("TRAINER_THROW") && current_epoch() == 0 && index == 3 && rank_ == 1)
        throw std::runtime_error("rank 1 broke on purpose");
      return TinyModule::training_step(batch, index);
    }
    int rank_ = 0;
  } module;
  module.rank_ = rank;
  cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch).shuffle(true));
  trainer.fit(module, loader);
  // Rank 1 fails in its own code after fit, unwinding its Trainer (its Comm's goodbye is clean), while
  // rank 0 goes on to a collective of its own.
  if (std::getenv("TRAINER_FAIL_AFTER_FIT")) {
    if (rank == 1) {
      std::fprintf(stderr, "error: rank 1 fails after fit\n");
      throw std::runtime_error("rank 1 fails after fit");
    }
    trainer.world().comm().barrier();
  }
  std::printf("rank %d of %d (%s) trained %lld steps\n", rank, trainer.world().size(),
              trainer.world().launcher().c_str(), static_cast<long long>(trainer.global_step()));
  const char* secret = std::getenv("COHORT_JOB_SECRET");  // the launcher's per-job secret (docs/security.md)
  std::printf("job secret: %zu characters\n", secret ? std::strlen(secret) : size_t(0));
}

ProcResult run_program(const std::string& dir, Env extra = {}) {
  char self[4096];
  const ssize_t size = ::readlink("/proc/self/exe", self, sizeof self - 1);
  extra["TRAINER_TEST_DIR"] = dir;
  return run_process({std::string(self, size_t(size)), "--gtest_filter=TrainerSelfLaunch.DISABLED_Program",
                      "--gtest_also_run_disabled_tests"},
                     clean_env(extra), std::chrono::seconds(120));
}

TEST(TrainerSelfLaunch, StartsTheOtherWorkerWithPrefixedOutput) {
  const std::string dir = make_temp_dir("trainer_self_launch_");
  const ProcResult result = run_program(dir);
  EXPECT_EQ(result.code, 0) << result.describe();
  // Hostile pass 5, m4: they said "cohortrun/torchrun", a launcher the user never started.
  EXPECT_THAT(result.out, HasSubstr("rank 0 of 2 (self-launch) trained 8 steps\n"));
  EXPECT_THAT(result.out, HasSubstr("[rank1]: rank 1 of 2 (self-launch) trained 8 steps\n"));
  // Both ranks got the same fresh secret from the self-launch, as cohortrun's workers do.
  EXPECT_THAT(result.out, HasSubstr("\njob secret: 64 characters\n"));
  EXPECT_THAT(result.out, HasSubstr("[rank1]: job secret: 64 characters\n"));
  EXPECT_TRUE(alive_after(recorded_pids(dir), std::chrono::seconds(10)).empty());
  remove_tree(dir);
}

TEST(TrainerSelfLaunch, AWorkerDyingFailsTheJobNamingIt) {
  const std::string dir = make_temp_dir("trainer_self_fail_");
  const ProcResult result = run_program(dir, {{"TRAINER_FAIL", "1"}});
  EXPECT_NE(result.code, 0) << result.describe();
  EXPECT_THAT(result.out + result.err, HasSubstr("rank 1 exited with code 3: error: rank 1 broke on purpose"));
  // Said once, in the job's failure, not also as the worker's own line (hostile pass 16, m-1).
  const std::string all = result.out + result.err;
  size_t said = 0;
  for (size_t at = all.find("rank 1 broke on purpose"); at != std::string::npos;
       at = all.find("rank 1 broke on purpose", at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << result.describe();
  EXPECT_EQ(recorded_pids(dir).size(), 2u);
  EXPECT_TRUE(alive_after(recorded_pids(dir), std::chrono::seconds(10)).empty());
  remove_tree(dir);
}

// Under any launcher: a fit that fails on one rank with an error of its own aborts that rank's Comm,
// so the rank waiting for it in a collective stops at once with its first line (it waited for
// COHORT_TIMEOUT, 60 s here, while the failing process left with a clean goodbye).
TEST(TrainerMultiproc, AFitFailingOnOneRankStopsTheOthersWithItsLine) {
  RanksOptions options;
  options.env["COHORT_TIMEOUT"] = "60";
  options.deadline = std::chrono::seconds(120);
  run_ranks(2, [](int rank, int) {
    cohort::init();
    cohort::Trainer trainer(quiet("ddp").max_epochs(1));
    struct Failing : TinyModule {
      torch::Tensor training_step(cohort::Batch& batch, int64_t index) override {
        if (index == 3 && rank_ == 1) throw std::runtime_error("rank 1 broke on purpose");
        return TinyModule::training_step(batch, index);
      }
      int rank_ = 0;
    } module;
    module.rank_ = rank;
    cohort::DataLoader loader(tiny_data(), cohort::LoaderOptions().batch_size(kBatch));
    const auto start = std::chrono::steady_clock::now();
    std::string error = "no error";
    try {
      trainer.fit(module, loader);
    } catch (const std::exception& e) {  // rank 1's own error is no cohort::Error
      error = e.what();
    }
    if (rank != 0) return;
    EXPECT_THAT(error, HasSubstr("rank 1 broke on purpose"));
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0) << error;
  }, options);
}

// A worker that ends without dying (an error it unwinds in fit or in its own code after, an end before
// it joined) is named at once, not at COHORT_TIMEOUT (60 s here): its Comm's goodbye is clean, so rank 0
// learns it from the worker's abort or from the launcher in its own process. Before, rank 0 waited
// in its collective or in the rendezvous until the timeout.
struct EndCase {
  const char* variable;
  const char* message;
};

class TrainerSelfLaunchEnds : public ::testing::TestWithParam<EndCase> {};

TEST_P(TrainerSelfLaunchEnds, AWorkerEndingCleanlyIsNamedBeforeTheTimeout) {
  const std::string dir = make_temp_dir("trainer_self_end_");
  const auto start = std::chrono::steady_clock::now();
  const ProcResult result = run_program(dir, {{GetParam().variable, "1"}, {"COHORT_TIMEOUT", "60"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.code, 0) << result.describe();
  EXPECT_THAT(result.out + result.err, HasSubstr(GetParam().message)) << result.describe();
  EXPECT_THAT(result.out + result.err, Not(HasSubstr("timed out"))) << result.describe();
  EXPECT_LT(seconds, 40.0) << result.describe();
  EXPECT_TRUE(alive_after(recorded_pids(dir), std::chrono::seconds(10)).empty());
  remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainerSelfLaunchEnds,
    ::testing::Values(EndCase{"TRAINER_THROW", "[rank 0/2] rank 1 exited with code 1"},
                      EndCase{"TRAINER_FAIL_AFTER_FIT", "rank 1 exited with code 1: error: rank 1 fails after fit"},
                      EndCase{"TRAINER_DIE_BEFORE_INIT",
                              "rank 1 exited with code 5: error: rank 1 ended before joining"}),
    [](const ::testing::TestParamInfo<EndCase>& info) { return std::string(info.param.variable).substr(8); });

// A stopped worker: rank 0's collective times out naming rank 1, and the job ends at once: the
// stopped worker gets SIGTERM with SIGCONT (it runs its handler instead of waiting for SIGKILL), and
// rank 0 waits for a worker's failure only briefly. Before, the job ended 27 s after the stop with
// COHORT_TIMEOUT=10 (a 10 s wait for a failure that never came, then 5 s to SIGKILL): with
// COHORT_TIMEOUT=4 that was 19 s or more; now about 4 + 3 s, well within the bound of 14 s.
TEST(TrainerSelfLaunch, AStoppedWorkerIsNamedAndEndedPromptly) {
  const std::string dir = make_temp_dir("trainer_self_stop_");
  const ProcResult result = run_program(dir, {{"TRAINER_STOP", "1"}, {"COHORT_TIMEOUT", "4"}});
  const auto ended = std::chrono::steady_clock::now().time_since_epoch().count();
  EXPECT_NE(result.code, 0) << result.describe();
  EXPECT_THAT(result.out + result.err, HasSubstr("timed out after 4000 ms: rank 1 never arrived"));
  EXPECT_THAT(result.err, HasSubstr("[rank1]: rank 1 got SIGTERM after SIGSTOP"));
  std::ifstream stopped(dir + "/stopped");
  int64_t stop_time = 0;
  ASSERT_TRUE(stopped >> stop_time) << result.describe();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::duration(ended - stop_time)).count(), 14.0)
      << result.describe();
  EXPECT_TRUE(alive_after(recorded_pids(dir), std::chrono::seconds(10)).empty());
  remove_tree(dir);
}

}  // namespace

}  // namespace trainer_multiproc_test
