// models/gpt.h's GPT under ZeRO stage 3 with its blocks as sharding units, on 2 and 4 rank processes:
// 20 AdamW steps end at the parameters of one process stepping on the global batch (1e-5), with the
// tied head (one tensor, in the root unit), reshard_after_forward on and off, and activation
// checkpointing on and off; and, in one process, a block recomputed in backward draws the dropout
// masks its forward drew (the gradients equal the plain run's).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/world.h"
#include "cohort/zero.h"
#include "models/gpt.h"
#include "support/multiproc.h"

namespace gpt_fsdp_test {

using cohort::models::GPT;
using cohort::models::GPTConfig;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

constexpr int64_t kVocab = 13, kBlock = 8, kRows = 2, kSteps = 20;

GPTConfig config_of(cohort::UnitOptions unit, double dropout = 0.0) {
  return GPTConfig().n_layer(3).n_head(2).n_embd(16).block_size(kBlock).vocab_size(kVocab).dropout(dropout).unit(unit);
}

std::pair<torch::Tensor, torch::Tensor> global_batch(int step, int size) {
  torch::manual_seed(200 + step);
  auto tokens = torch::randint(0, kVocab, {size * kRows, kBlock + 1});
  return {tokens.narrow(1, 0, kBlock), tokens.narrow(1, 1, kBlock)};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), targets.reshape(-1));
}

torch::optim::AdamWOptions adamw() { return torch::optim::AdamWOptions(3e-3).weight_decay(0.1); }

std::map<std::string, torch::Tensor> train_reference(int size) {
  torch::manual_seed(9);
  GPT gpt(config_of({}));
  torch::optim::AdamW opt(gpt->parameters(), adamw());
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = global_batch(step, size);
    opt.zero_grad();
    loss_of(gpt->forward(x), y).backward();
    opt.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : gpt->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

void sharded_equals_one_process(int rank, int size) {
  cohort::init();
  const auto reference = train_reference(size);
  for (bool reshard : {true, false})
    for (bool recompute : {false, true}) {
      torch::manual_seed(9);
      GPT gpt(config_of(cohort::UnitOptions().reshard_after_forward(reshard).activation_checkpointing(recompute)));
      auto engine = cohort::initialize(
          cohort::ZeroConfig().world_size(size).zero_optimization(cohort::ZeroOptimizationConfig().stage(3)), gpt,
          cohort::EngineOptions().optimizer_factory(
              [](std::vector<torch::Tensor> shards) { return std::make_unique<torch::optim::AdamW>(shards, adamw()); }));
      for (int step = 0; step < kSteps; ++step) {
        auto [x, y] = global_batch(step, size);
        engine.backward(loss_of(engine.forward(x.narrow(0, rank * kRows, kRows)), y.narrow(0, rank * kRows, kRows)));
        engine.step();
      }
      double worst = 0;
      for (const auto& [name, value] : engine.full_parameters())
        worst = std::max(worst, (value - reference.at(name)).abs().max().item<double>());
      const std::string what = std::string(reshard ? "reshard" : "keep-gathered") + (recompute ? " recompute" : "");
      report(what + " diff " + std::to_string(worst));
      EXPECT_LT(worst, 1e-5) << what;
    }
}

}  // namespace

TEST(GptFsdp, BlocksAsUnitsEqualOneProcessOnTwoRanks) { run_ranks(2, sharded_equals_one_process); }
TEST(GptFsdp, BlocksAsUnitsEqualOneProcessOnFourRanks) { run_ranks(4, sharded_equals_one_process); }

TEST(GptFsdp, RecomputedBlocksDrawTheSameDropoutMasks) {
  // One process, no engine: a block recomputed in backward must see the masks its forward drew, so
  // the gradients equal those of the plain run.
  auto gradients = [](bool recompute) {
    torch::manual_seed(9);
    GPT gpt(config_of(cohort::UnitOptions().activation_checkpointing(recompute), 0.3));
    auto [x, y] = global_batch(0, 1);
    torch::manual_seed(77);
    loss_of(gpt->forward(x), y).backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : gpt->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = gradients(false), recomputed = gradients(true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], 1e-5, 1e-6)) << i;
}

}  // namespace gpt_fsdp_test
