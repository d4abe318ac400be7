// Resume equivalence: 40 DDP steps straight equal 20 steps, a save, a new process group, a load and
// 20 more steps: bitwise at the same world size, within float tolerance at another world size with
// the same global batch (12 samples: 6 per rank on 2 ranks, 4 on 3). The save lands mid-epoch
// (8 steps per epoch), so the resume must skip exactly the batches already trained.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/checkpoint.h"
#include "cohort/ddp.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "support/resume_runs.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_resume_test {

namespace fs = std::filesystem;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

constexpr int64_t kSamples = 96, kGlobalBatch = 12, kSteps = 40, kSaveAt = 20;

// Trains from scratch, or from the checkpoint in `load_from`, up to `until` steps; saves at kSaveAt
// into `save_to` when given; rank 0 writes the final parameters to `params_out`.
void train(int rank, int size, const std::string& load_from, const std::string& save_to,
           int64_t until, const std::string& params_out) {
  cohort::init();
  torch::manual_seed(1);
  cohort::testing::Mlp model;
  cohort::DistributedDataParallel ddp(model);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-2));
  torch::manual_seed(100);
  const torch::Tensor x = torch::randn({kSamples, 20}), y = torch::randint(0, 5, {kSamples}, torch::kLong);
  cohort::DistributedSampler sampler(kSamples, cohort::SamplerOptions().shuffle(true).seed(3));
  int64_t samples_in_epoch = 0;
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt).add("sampler", sampler, samples_in_epoch);
  int64_t step = 0;
  if (!load_from.empty()) {
    ASSERT_TRUE(cohort::load_checkpoint(load_from, state, cohort::LoadOptions().must_exist(true)));
    step = state.step();
  }
  const int64_t batch = kGlobalBatch / size;
  while (step < until) {
    const auto batches = sampler.batch_tensors(batch);
    for (size_t i = samples_in_epoch / kGlobalBatch; i < batches.size() && step < until; ++i) {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(ddp(x.index({batches[i]})), y.index({batches[i]})).backward();
      opt.step();
      ++step;
      samples_in_epoch += kGlobalBatch;
      if (i + 1 == batches.size()) {
        sampler.set_epoch(sampler.epoch() + 1);
        samples_in_epoch = 0;
      }
      if (step == kSaveAt && !save_to.empty()) cohort::save_checkpoint(save_to, state.set_step(step));
    }
  }
  if (rank == 0) torch::save(model->parameters(), params_out);
}

}  // namespace

TEST(CheckpointResume, ResumedRunEqualsUninterruptedRun) {
  cohort::testing::RanksOptions options;
  const std::string dir = cohort::testing::shared_temp_dir(options, "CKPT_TEST_DIR", "checkpoint_resume_");
  const std::string ckpt = dir + "/ckpt";
  const auto body = [&](int rank, int size) {
    const auto part = cohort::testing::resume_run("CKPT");
    train(rank, size, part.load, part.save, part.until, part.out);
    report("trained");
  };
  const auto run = [&](int ranks, const std::string& load, const std::string& save, int64_t until,
                       const std::string& out) {
    cohort::testing::set_resume_run(options, "CKPT", {load, save, until, dir + "/" + out});
    for (const auto& r : run_ranks(ranks, body, options)) {
      EXPECT_EQ(r.reports, std::vector<std::string>{"trained"}) << r.output;
    }
  };
  run(2, "", "", kSteps, "straight.pt");
  run(2, "", ckpt, kSaveAt, "first.pt");
  run(2, ckpt, "", kSteps, "resumed2.pt");
  run(3, ckpt, "", kSteps, "resumed3.pt");
  if (cohort::testing::is_rank_process()) return;
  const auto straight = cohort::testing::load_tensors(dir + "/straight.pt"), first = cohort::testing::load_tensors(dir + "/first.pt");
  const auto same = cohort::testing::load_tensors(dir + "/resumed2.pt"), other = cohort::testing::load_tensors(dir + "/resumed3.pt");
  ASSERT_EQ(straight.size(), same.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_FALSE(torch::equal(straight[i], first[i])) << "the last 20 steps must change parameter " << i;
    EXPECT_TRUE(torch::equal(straight[i], same[i])) << "parameter " << i << " differs at 2 ranks";
    EXPECT_TRUE(torch::allclose(straight[i], other[i], 1e-4, 1e-5))
        << "parameter " << i << " at 3 ranks: max difference "
        << (straight[i] - other[i]).abs().max().item<double>();
  }
  fs::remove_all(dir);
}

}  // namespace checkpoint_resume_test
