// cohort::ShardedInit (DeepSpeed's zero.Init): units sharded as they are made train exactly as the
// same model sharded by the engine (rank 0's initialisation, fp32 and bf16, a unit nested in a
// unit, a tied head in the root); constructing the model holds this rank's shards, not the whole
// model; and each refusal's message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "cohort/fsdp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/errors.h"
#include "support/multiproc.h"

namespace sharded_init_test {

using cohort::testing::error_of;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

constexpr int64_t kVocab = 13, kWidth = 16;

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    fc = register_module("fc", torch::nn::Linear(kWidth, kWidth));
    mlp = cohort::fully_shard(register_module("mlp", torch::nn::Linear(kWidth, kWidth)));  // a unit in a unit
  }
  torch::Tensor forward(torch::Tensor x) { return x + mlp(torch::gelu(fc->forward(ln->forward(x)))); }
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear fc{nullptr};
  cohort::Unit<torch::nn::LinearImpl> mlp;
};
TORCH_MODULE(Block);

struct LMImpl : torch::nn::Module {
  explicit LMImpl(int seed) {
    torch::manual_seed(seed);
    wte = register_module("wte", torch::nn::Embedding(kVocab, kWidth));
    for (int i = 0; i < 3; ++i) blocks.push_back(cohort::fully_shard(register_module("h" + std::to_string(i), Block())));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    auto x = wte->forward(tokens);
    for (auto& block : blocks) x = block(x);
    return torch::linear(x, wte->weight);  // tied head: the root's
  }
  torch::nn::Embedding wte{nullptr};
  std::vector<cohort::Unit<BlockImpl>> blocks;
};
TORCH_MODULE(LM);

cohort::ZeroConfig config_of(bool bf16) {
  return cohort::ZeroConfig()
      .bf16(cohort::Bf16Config().enabled(bf16))
      .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(0.01).weight_decay(0.1))
      .zero_optimization(cohort::ZeroOptimizationConfig().stage(3).overlap_comm(true));
}

std::map<std::string, torch::Tensor> trained(bool sharded_init, bool bf16, int rank) {
  // Each rank initialises differently: only rank 0's initialisation, broadcast, may survive.
  LM model{nullptr};
  if (sharded_init) {
    cohort::ShardedInit scope;
    model = LM(100 + rank);
  } else {
    model = LM(100 + rank);
  }
  auto engine = cohort::initialize(config_of(bf16), model);
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(step * 10 + rank);
    auto tokens = torch::randint(0, kVocab, {2, 5});
    auto logits = engine.forward(tokens);
    engine.backward(torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}).to(torch::kFloat),
                                                         tokens.reshape(-1)));
    engine.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, value] : engine.full_parameters()) out[name] = value.to(torch::kFloat);
  return out;
}

double live_mib() {
  const auto info = mallinfo2();
  return double(info.uordblks + info.hblkhd) / (1 << 20);
}

constexpr int64_t kBig = 1024;  // a unit of the memory test: one Linear of 1024 x 1024, ~4 MiB
constexpr int kBigUnits = 6;

struct LayersImpl : torch::nn::Module {
  LayersImpl() {
    for (int i = 0; i < kBigUnits; ++i)
      units.push_back(cohort::fully_shard(register_module("l" + std::to_string(i), torch::nn::Linear(kBig, kBig))));
  }
  std::vector<cohort::Unit<torch::nn::LinearImpl>> units;
};
TORCH_MODULE(Layers);

}  // namespace

TEST(ShardedInit, TrainsExactlyAsTheEngineShardingTheWholeModel) {
  run_ranks(2, [](int rank, int) {
    cohort::init();
    for (bool bf16 : {false, true}) {
      const auto whole = trained(false, bf16, rank), sharded = trained(true, bf16, rank);
      ASSERT_EQ(whole.size(), sharded.size());
      double worst = 0;
      for (const auto& [name, value] : whole) worst = std::max(worst, (value - sharded.at(name)).abs().max().item<double>());
      const LM rank0_init(100), rank1_init(101);
      const double ranks_differ =
          (rank0_init->named_parameters()["h0.fc.weight"] - rank1_init->named_parameters()["h0.fc.weight"]).abs().max().item<double>();
      report(std::string(bf16 ? "bf16" : "fp32") + ": max difference " + std::to_string(worst));
      EXPECT_EQ(worst, 0.0) << (bf16 ? "bf16" : "fp32");
      EXPECT_GT(ranks_differ, 1e-3);  // the ranks' own initialisations differ: the broadcast mattered
    }
  });
}

TEST(ShardedInit, ConstructionHoldsThisRanksShardsNotTheModel) {
  run_ranks(2, [](int, int) {
    cohort::init();
    const double unit_mib = double(kBig * kBig + kBig) * 4 / (1 << 20);
    double before = live_mib();
    Layers whole;
    const double whole_mib = live_mib() - before;
    before = live_mib();
    Layers sharded{nullptr};
    {
      cohort::ShardedInit scope;
      sharded = Layers();
    }
    const double sharded_mib = live_mib() - before;
    report("construction holds " + std::to_string(whole_mib) + " MiB whole, " + std::to_string(sharded_mib) +
           " MiB sharded over 2 ranks");
    EXPECT_GT(whole_mib, (kBigUnits - 0.5) * unit_mib);
    EXPECT_LT(sharded_mib, (kBigUnits / 2.0 + 0.5) * unit_mib);  // half of each unit, padding aside
    auto engine = cohort::initialize(config_of(false), sharded);
    EXPECT_LT(engine.memory_report().parameter_bytes, int64_t((kBigUnits / 2.0 + 0.5) * unit_mib * (1 << 20)));
  });
}

TEST(ShardedInit, RefusalsNameWhatToDo) {
  run_ranks(1, [](int, int) {
    cohort::init();
    LM model{nullptr};
    {
      cohort::ShardedInit scope;
      EXPECT_EQ(error_of([] { cohort::ShardedInit again; }),
                "cohort::ShardedInit: another ShardedInit is alive on this thread; make the model inside one");
      model = LM(1);
    }
    EXPECT_EQ(error_of([&] { model->blocks[0](torch::ones({1, kWidth})); }),
              "sharding unit BlockImpl: its parameters were sharded when it was made (cohort::ShardedInit), so it "
              "runs only inside a ZeRO stage 3 engine (cohort::initialize with zero_optimization.stage 3), called "
              "through engine.forward");
    auto stage2 = config_of(false);
    stage2.zero_optimization().stage(2);
    EXPECT_EQ(error_of([&] { cohort::initialize(stage2, model); }),
              "ZeRO engine: the model's units were sharded when they were made (cohort::ShardedInit), which needs "
              "zero_optimization.stage 3, got stage 2");
    { auto engine = cohort::initialize(config_of(false), model); }
    EXPECT_EQ(error_of([&] { cohort::initialize(config_of(false), model); }),
              "ZeRO stage 3: unit 'h0' was sharded when it was made and an earlier engine took its shard; build "
              "the model again for a new engine");
  });
}

}  // namespace sharded_init_test
