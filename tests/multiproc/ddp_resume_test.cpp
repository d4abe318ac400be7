// A DDP job resumed from a checkpoint ends bit-equal to one never interrupted, at 3 ranks on Gloo
// (COHORT_SHM=0, the transport of every multi-host job), where the sum of an element depends on its
// place in its bucket. The model registers its layers in another order than backward reaches them,
// so the bucket layout before DDP learns the arrival order differs from the one after it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "cohort/checkpoint.h"
#include "cohort/ddp.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "support/resume_runs.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace ddp_resume_test {

using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

constexpr int kRanks = 3, kBatch = 8, kSteps = 8, kSaveAt = 4;

// The head is registered first, so the initial buckets (reverse registration order) start with the
// body, while backward delivers the head's gradients first.
struct HeadFirstImpl : torch::nn::Module {
  HeadFirstImpl() {
    head = register_module("head", torch::nn::Linear(48, 5));
    body = register_module("body", torch::nn::Linear(20, 48));
  }
  torch::Tensor forward(torch::Tensor x) { return head(torch::relu(body(x))); }
  torch::nn::Linear head{nullptr}, body{nullptr};
};
TORCH_MODULE(HeadFirst);

// Trains from scratch, or from the checkpoint in `load_from`, up to `until` steps, saving into
// `save_to` (when given) after kSaveAt; rank 0 writes the final parameters to `params_out`.
void train(int rank, const std::string& load_from, const std::string& save_to, int64_t until,
           const std::string& params_out) {
  cohort::init();
  torch::manual_seed(1);
  HeadFirst model;
  cohort::DistributedDataParallel ddp(model);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-2));
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt);
  int64_t step = 0;
  if (!load_from.empty()) {
    ASSERT_TRUE(cohort::load_checkpoint(load_from, state, cohort::LoadOptions().must_exist(true)));
    step = state.step();
  }
  for (; step < until; ++step) {
    torch::manual_seed(100 + step);  // step k's global batch, whichever process trains it
    const auto x = torch::randn({kRanks * kBatch, 20});
    const auto y = torch::randint(0, 5, {kRanks * kBatch}, torch::kLong);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp(x.narrow(0, rank * kBatch, kBatch)), y.narrow(0, rank * kBatch, kBatch))
        .backward();
    opt.step();
    if (step + 1 == kSaveAt && !save_to.empty()) cohort::save_checkpoint(save_to, state.set_step(step + 1));
  }
  if (rank == 0) torch::save(model->parameters(), params_out);
}

}  // namespace

TEST(DdpResume, ResumedRunEqualsUninterruptedRunBitwiseOnGloo) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_SHM"] = "0";
  const std::string dir = cohort::testing::shared_temp_dir(options, "DDP_RESUME_DIR", "ddp_resume_");
  const auto body = [](int rank, int) {
    const auto part = cohort::testing::resume_run("DDP_RESUME");
    train(rank, part.load, part.save, part.until, part.out);
    report("trained");
  };
  const auto run = [&](const std::string& load, const std::string& save, int64_t until, const std::string& out) {
    cohort::testing::set_resume_run(options, "DDP_RESUME", {load, save, until, dir + "/" + out});
    for (const auto& r : run_ranks(kRanks, body, options)) {
      EXPECT_EQ(r.reports, std::vector<std::string>{"trained"}) << r.output;
    }
  };
  run("", "", kSteps, "straight.pt");
  run("", dir + "/ckpt", kSaveAt, "first.pt");
  run(dir + "/ckpt", "", kSteps, "resumed.pt");
  if (cohort::testing::is_rank_process()) return;
  const auto straight = cohort::testing::load_tensors(dir + "/straight.pt"), first = cohort::testing::load_tensors(dir + "/first.pt");
  const auto resumed = cohort::testing::load_tensors(dir + "/resumed.pt");
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_FALSE(torch::equal(straight[i], first[i])) << "the last steps must change parameter " << i;
    EXPECT_TRUE(torch::equal(straight[i], resumed[i]))
        << "parameter " << i << " of the resumed run differs from the uninterrupted run's by up to "
        << (straight[i] - resumed[i]).abs().max().item<double>();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace ddp_resume_test
