// The ZeRO engine on real rank processes. Every rank also trains the same model with cohort's DDP
// and torch::optim::Adam as the reference: stages 1, 2 and 3 must end with DDP's parameters (1e-5)
// after 20 steps, on layers whose sizes do not divide by the world size, with a frozen parameter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "cohort/ddp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace zero_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::run_ranks;

namespace {

constexpr int kSteps = 20, kBatch = 4;

// 6 -> 7 -> 5 -> 3: 49, 40 and 18 elements; the last bias is frozen.
torch::nn::Sequential make_model() {
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(6, 7), torch::nn::ReLU(), torch::nn::Linear(7, 5),
                              torch::nn::Tanh(), torch::nn::Linear(5, 3));
  model->named_parameters()["4.bias"].set_requires_grad(false);
  return model;
}

cohort::ZeroConfig adam_config(int stage, int world) {
  return cohort::ZeroConfig()
      .world_size(world)
      .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(30).overlap_comm(stage >= 2))
      .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(0.01).decoupled_weight_decay(false));
}

// This rank's slice of step `step`'s global batch (the same on every rank: seeded by the step).
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int size, int per_rank = kBatch) {
  torch::manual_seed(1000 + step);
  auto x = torch::randn({int64_t(size) * per_rank, 6});
  auto y = torch::randint(0, 3, {int64_t(size) * per_rank}, torch::kLong);
  return {x.narrow(0, rank * per_rank, per_rank), y.narrow(0, rank * per_rank, per_rank)};
}

torch::nn::Sequential train_ddp(int rank, int size, double clip = 0) {
  auto model = make_model();
  cohort::DistributedDataParallel ddp(model);
  std::vector<torch::Tensor> trainable;
  for (auto& p : model->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  torch::optim::Adam opt(trainable, torch::optim::AdamOptions(0.01));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, rank, size);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(trainable, clip);
    opt.step();
  }
  return model;
}

double max_difference(cohort::ZeroEngineCore& engine, torch::nn::Sequential& reference) {
  double worst = 0;
  auto named = reference->named_parameters();
  for (const auto& [name, value] : engine.full_parameters())
    worst = std::max(worst, (value - named[name]).abs().max().item<double>());
  return worst;
}

void equivalence_body(int rank, int size) {
  cohort::init();
  auto reference = train_ddp(rank, size);
  for (int stage : {1, 2, 3}) {
    auto model = make_model();
    auto engine = cohort::initialize(adam_config(stage, size), model);
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batch(step, rank, size);
      engine.backward(torch::nn::functional::cross_entropy(engine.forward(x), y));
      engine.step();
    }
    const double diff = max_difference(engine, reference);
    report("stage " + std::to_string(stage) + " diff " + std::to_string(diff));
    EXPECT_LT(diff, 1e-5) << "stage " << stage;
    // The frozen bias is untouched, and whole on every rank.
    EXPECT_TRUE(model->named_parameters()["4.bias"].equal(reference->named_parameters()["4.bias"]));
    EXPECT_EQ(engine.global_steps(), kSteps);
  }
}

TEST(ZeroEngine, StagesOneTwoThreeEqualDdpOnTwoRanks) { run_ranks(2, equivalence_body); }
TEST(ZeroEngine, StagesOneTwoThreeEqualDdpOnThreeRanks) { run_ranks(3, equivalence_body); }

TEST(ZeroEngine, AccumulationAndClippingEqualDdpWithTheLargerBatch) {
  // gradient_accumulation_steps 2 over half batches equals one full batch; clipping by the global
  // norm across shards equals torch's clip_grad_norm_ on the whole gradient.
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    auto reference = train_ddp(rank, size, 0.05);
    for (int stage : {0, 2, 3}) {
      auto model = make_model();
      auto engine = cohort::initialize(adam_config(stage, size).gradient_accumulation_steps(2).gradient_clipping(0.05), model);
      for (int step = 0; step < kSteps; ++step) {
        auto [x, y] = batch(step, rank, size);
        for (int micro = 0; micro < 2; ++micro) {
          EXPECT_EQ(engine.is_gradient_accumulation_boundary(), micro == 1);
          auto xs = x.narrow(0, micro * kBatch / 2, kBatch / 2), ys = y.narrow(0, micro * kBatch / 2, kBatch / 2);
          engine.backward(torch::nn::functional::cross_entropy(engine.forward(xs), ys));
          engine.step();
        }
      }
      EXPECT_GT(engine.last_gradient_norm(), 0.05) << "clipping was active";
      EXPECT_LT(max_difference(engine, reference), 1e-5) << "stage " << stage;
    }
  });
}

TEST(ZeroEngine, CommunicationDataTypeReducesTheCastGradientsBitForBit) {
  // communication_data_type fp16/bf16: one SGD step of lr 1 moves each parameter by exactly the
  // allreduce of every rank's gradient cast to that dtype and divided by the world size there.
  run_ranks(2, [](int rank, int size) {
    const cohort::World world = cohort::init();
    cohort::Comm& comm = world.comm();
    auto [x, y] = batch(0, rank, size);
    auto plain = make_model();
    torch::nn::functional::cross_entropy(plain->forward(x), y).backward();
    for (const auto& [dtype, type] : {std::pair{torch::kHalf, cohort::CommDataType::kFp16},
                                      std::pair{torch::kBFloat16, cohort::CommDataType::kBf16}}) {
      std::map<std::string, torch::Tensor> expected;
      for (const auto& item : plain->named_parameters()) {
        if (!item.value().requires_grad()) continue;
        torch::Tensor reduced = item.value().grad().to(dtype).div_(size);
        comm.allreduce(reduced);
        expected[item.key()] = item.value().detach() - reduced.to(torch::kFloat);
      }
      for (int stage : {0, 1, 2, 3}) {
        auto model = make_model();
        auto config = cohort::ZeroConfig()
                          .world_size(size)
                          .communication_data_type(type)
                          .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(30))
                          .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(1.0));
        auto engine = cohort::initialize(config, model);
        engine.backward(torch::nn::functional::cross_entropy(engine.forward(x), y));
        engine.step();
        for (const auto& [name, value] : engine.full_parameters()) {
          if (expected.count(name) == 0) continue;  // the frozen bias
          EXPECT_TRUE(torch::equal(value, expected[name]))
              << "stage " << stage << " dtype " << dtype << " " << name << ": max diff "
              << (value - expected[name]).abs().max().item<double>();
        }
      }
    }
  });
}

TEST(ZeroEngine, SgdWithMomentumAndAdamWStepOnShards) {
  // Plain SGD also catches gradient scale errors that Adam's normalization would hide.
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    for (auto type : {cohort::OptimizerType::kSgd, cohort::OptimizerType::kAdamW}) {
      auto optimizer = cohort::OptimizerConfig().type(type).lr(0.05).momentum(0.9).weight_decay(0.01);
      auto model = make_model();
      cohort::DistributedDataParallel ddp(model);
      std::vector<torch::Tensor> trainable;
      for (auto& p : model->parameters())
        if (p.requires_grad()) trainable.push_back(p);
      std::unique_ptr<torch::optim::Optimizer> opt;
      if (type == cohort::OptimizerType::kSgd)
        opt = std::make_unique<torch::optim::SGD>(trainable, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
      else
        opt = std::make_unique<torch::optim::AdamW>(trainable, torch::optim::AdamWOptions(0.05).weight_decay(0.01));
      for (int step = 0; step < 10; ++step) {
        auto [x, y] = batch(step, rank, size);
        opt->zero_grad();
        torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
        opt->step();
      }
      for (int stage : {0, 1, 2, 3}) {
        auto zero_model = make_model();
        auto config = cohort::ZeroConfig()
                          .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(30))
                          .optimizer(optimizer);
        auto engine = cohort::initialize(config, zero_model);
        for (int step = 0; step < 10; ++step) {
          auto [x, y] = batch(step, rank, size);
          engine.backward(torch::nn::functional::cross_entropy(engine.forward(x), y));
          engine.step();
        }
        EXPECT_LT(max_difference(engine, model), 1e-5) << "stage " << stage;
      }
    }
  });
}

TEST(ZeroEngine, MemoryReportMatchesTheZeroPaperFormulas) {
  // Mixed-precision (bf16) Adam on 3 ranks: baseline 16Ψ; stage 1 4Ψ + 12Ψ/N; stage 2 2Ψ + 14Ψ/N;
  // stage 3 16Ψ/N; within the padding (fewer than N elements per group).
  run_ranks(3, [](int rank, int size) {
    cohort::init();
    for (int stage : {0, 1, 2, 3}) {
      auto model = make_model();
      auto config = adam_config(stage, size).bf16(cohort::Bf16Config().enabled(true));
      auto engine = cohort::initialize(config, model);
      auto [x, y] = batch(0, rank, size);
      engine.backward(torch::nn::functional::cross_entropy(engine.forward(x).to(torch::kFloat), y));
      engine.step();
      const auto report_ = engine.memory_report();
      const double psi = double(report_.num_parameters), n = size;
      EXPECT_EQ(report_.num_parameters, 49 + 40 + 15);
      const double expected[] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
      const double padding = 4.0 * size * 16;  // 4 groups, under N padding elements each, 16 bytes each
      const double measured = double(report_.total());
      report("stage " + std::to_string(stage) + " bytes " + std::to_string(report_.total()) + " expected " +
             std::to_string(expected[stage]));
      EXPECT_NEAR(measured, expected[stage], padding) << "stage " << stage;
      EXPECT_EQ(report_.buffer_bytes, 0) << "nothing gathered or in flight between steps";
      if (stage == 3)
        for (auto& p : model->parameters())
          if (p.requires_grad()) EXPECT_EQ(p.numel(), 0) << "stage 3 frees whole parameters between steps";
    }
  });
}

// y = x * w + b element by element: fp16 on CPU has elementwise kernels but no matmul in LibTorch 1.13.
struct ScaleImpl : torch::nn::Module {
  ScaleImpl() {
    w = register_parameter("w", torch::ones({5}));
    b = register_parameter("b", torch::zeros({5}));
  }
  torch::Tensor forward(torch::Tensor x) { return x * w + b; }
  torch::Tensor w, b;
};
TORCH_MODULE(Scale);

TEST(ZeroEngine, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    for (int stage : {1, 3}) {
      torch::nn::Sequential model{Scale(), Scale()};
      auto config = adam_config(stage, size).fp16(
          cohort::Fp16Config().enabled(true).initial_scale_power(8).hysteresis(1).loss_scale_window(1000));
      auto engine = cohort::initialize(config, model);
      EXPECT_EQ(engine.compute_dtype(), torch::kHalf);
      EXPECT_EQ(engine.loss_scale(), 256.0);
      auto run = [&](float poison) {
        auto x = torch::full({4, 5}, 0.5);
        auto out = engine.forward(x);
        auto loss = (out.to(torch::kFloat) - 1).pow(2).mean();
        engine.backward(loss * poison);
        engine.step();
      };
      auto before = engine.full_parameters();
      // Rank 1's loss is huge: its fp16 gradients overflow; rank 0's are fine, yet both skip.
      run(rank == 1 ? 1e30f : 1.0f);
      EXPECT_TRUE(engine.last_step_skipped());
      EXPECT_EQ(engine.skipped_steps(), 1);
      EXPECT_EQ(engine.loss_scale(), 128.0);
      auto after = engine.full_parameters();
      for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(before[i].second.equal(after[i].second));
      run(1.0f);
      EXPECT_FALSE(engine.last_step_skipped());
      EXPECT_EQ(engine.global_steps(), 2);
      auto updated = engine.full_parameters();
      EXPECT_FALSE(updated[0].second.equal(before[0].second)) << "the clean step updates";
    }
  });
}

TEST(ZeroEngine, WarmupScheduleDrivesTheLearningRate) {
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    auto scheduler = cohort::SchedulerConfig()
                         .type(cohort::SchedulerType::kWarmupLR)
                         .warmup_min_lr(0.0)
                         .warmup_max_lr(0.01)
                         .warmup_num_steps(4)
                         .warmup_type(cohort::WarmupType::kLinear);
    auto model = make_model();
    auto engine = cohort::initialize(adam_config(2, size).scheduler(scheduler), model);
    for (int step = 0; step < 6; ++step) {
      // DeepSpeed: the k-th update runs at the rate of scheduler iteration k - 1.
      EXPECT_DOUBLE_EQ(engine.lr(), cohort::warmup_lr(scheduler, step - 1));
      auto [x, y] = batch(step, rank, size);
      engine.backward(torch::nn::functional::cross_entropy(engine.forward(x), y));
      engine.step();
    }
    EXPECT_DOUBLE_EQ(engine.lr(), 0.01);
  });
}

TEST(ZeroEngine, StageThreeShardsAModelWithoutUnitsAsOne) {
  // Not a Sequential and no unit marked: the whole model is the root unit, and trains as stage 2 does.
  run_ranks(2, [](int rank, int size) {
    cohort::init();
    struct Net : torch::nn::Module {
      Net() {
        torch::manual_seed(4);
        a = register_module("a", torch::nn::Linear(6, 5));
        b = register_module("b", torch::nn::Linear(5, 3));
      }
      torch::Tensor forward(torch::Tensor x) { return b->forward(torch::tanh(a->forward(x))); }
      torch::nn::Linear a{nullptr}, b{nullptr};
    };
    std::vector<std::vector<std::pair<std::string, torch::Tensor>>> results;
    for (int stage : {2, 3}) {
      auto engine = cohort::initialize(adam_config(stage, size), std::make_shared<Net>());
      for (int step = 0; step < 3; ++step) {
        auto [x, y] = batch(step, rank, size);
        engine.backward(torch::nn::functional::cross_entropy(engine.forward(x), y));
        engine.step();
      }
      results.push_back(engine.full_parameters());
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_TRUE(results[0][i].second.allclose(results[1][i].second, 1e-6, 1e-7)) << results[0][i].first;
    auto missing = cohort::testing::error_of([] {
      cohort::initialize(cohort::ZeroConfig(), make_model());
    });
    EXPECT_THAT(missing, HasSubstr("the config has no \"optimizer\" section"));
  });
}

}  // namespace

}  // namespace zero_test
