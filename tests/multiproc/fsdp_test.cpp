// Sharding units (include/cohort/fsdp.h) on real rank processes: a model that is not a Sequential
// (blocks with two inputs, a tied embedding, a parameter no step uses, a buffer) trains at ZeRO
// stage 3 on 2 and 4 ranks to the parameters of one process on the global batch (1e-5, 20 steps),
// with SGD-momentum and AdamW, reshard_after_forward on and off, activation checkpointing on and
// off; a checkpoint written on 4 ranks resumes on 2 and continues equal; each refusal's message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/checkpoint.h"
#include "cohort/ddp.h"
#include "cohort/fsdp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/engine_bits.h"
#include "support/errors.h"
#include "support/multiproc.h"

namespace fsdp_test {

using cohort::testing::report;
using cohort::testing::max_difference;
using cohort::testing::run_ranks;

namespace {

constexpr int64_t kVocab = 11, kEmbed = 12, kSeq = 5, kBatch = 2;

struct MlpBlockImpl : torch::nn::Module {
  MlpBlockImpl() {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbed})));
    fc1 = register_module("fc1", torch::nn::Linear(kEmbed, 3 * kEmbed));
    fc2 = register_module("fc2", torch::nn::Linear(3 * kEmbed, kEmbed));
    spare = register_module("spare", torch::nn::Linear(2, 2));  // in no step's graph
    register_buffer("gain", torch::full({kEmbed}, 0.5));
  }
  // Two inputs: the stream and a mask on the positions.
  torch::Tensor forward(torch::Tensor x, torch::Tensor mask) {
    auto h = torch::dropout(torch::gelu(fc1->forward(ln->forward(x))), 0.1, is_training());
    return x + fc2->forward(h) * mask.unsqueeze(-1) * named_buffers()["gain"];
  }
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, spare{nullptr};
};
TORCH_MODULE(MlpBlock);

struct TinyLMImpl : torch::nn::Module {
  explicit TinyLMImpl(cohort::UnitOptions unit) {
    torch::manual_seed(11);
    wte = register_module("wte", torch::nn::Embedding(kVocab, kEmbed));
    for (int i = 0; i < 3; ++i)
      blocks.push_back(cohort::fully_shard(register_module("h" + std::to_string(i), MlpBlock()), unit));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbed})));
  }
  torch::Tensor forward(torch::Tensor tokens, torch::Tensor mask) {
    auto x = wte->forward(tokens);
    for (auto& block : blocks) x = block(x, mask);
    return torch::linear(ln_f->forward(x), wte->weight);  // the head is the embedding (tied)
  }
  torch::nn::Embedding wte{nullptr};
  std::vector<cohort::Unit<MlpBlockImpl>> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(TinyLM);

struct Variant {
  bool adamw = false, reshard = true, recompute = false;
  std::string name() const {
    return std::string(adamw ? "adamw" : "sgd-m") + (reshard ? "" : " keep-gathered") + (recompute ? " recompute" : "");
  }
};

// Step `step`'s global batch, the same on every rank: tokens, mask, targets.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> global_batch(int step, int size) {
  torch::manual_seed(100 + step);
  const int64_t rows = size * kBatch;
  return {torch::randint(0, kVocab, {rows, kSeq}), (torch::rand({rows, kSeq}) > 0.2).to(torch::kFloat),
          torch::randint(0, kVocab, {rows, kSeq})};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), target.reshape(-1));
}

cohort::ZeroConfig config_of(const Variant& run, int size) {
  auto optimizer = run.adamw ? cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(0.01).weight_decay(0.1)
                             : cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.1).momentum(0.9);
  return cohort::ZeroConfig().world_size(size).optimizer(optimizer).zero_optimization(
      cohort::ZeroOptimizationConfig().stage(3).overlap_comm(true).stage3_prefetch_bucket_size(1000));
}

// One process, no engine, the whole global batch; a parameter without gradient counts as zero (the
// engine's rule, DeepSpeed's too).
std::map<std::string, torch::Tensor> train_reference(const Variant& run, int size, int steps) {
  TinyLM model{cohort::UnitOptions()};
  model->eval();  // dropout off: ranks and one process draw different masks
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (run.adamw)
    opt = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  else
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    auto [tokens, mask, target] = global_batch(step, size);
    opt->zero_grad();
    loss_of(model->forward(tokens, mask), target).backward();
    for (auto& p : model->parameters())
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    opt->step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

void train(cohort::ZeroEngine<TinyLMImpl>& engine, int rank, int size, int from, int to) {
  for (int step = from; step < to; ++step) {
    auto [tokens, mask, target] = global_batch(step, size);
    auto mine = [&](const torch::Tensor& t) { return t.narrow(0, rank * kBatch, kBatch); };
    engine.backward(loss_of(engine.forward(mine(tokens), mine(mask)), mine(target)));
    engine.step();
  }
}

void equivalence_body(int rank, int size) {
  cohort::init();
  for (bool adamw : {false, true})
    for (bool reshard : {true, false})
      for (bool recompute : {false, true}) {
        const Variant run{adamw, reshard, recompute};
        auto reference = train_reference(run, size, 20);
        TinyLM model(cohort::UnitOptions().reshard_after_forward(reshard).activation_checkpointing(recompute));
        model->eval();
        auto engine = cohort::initialize(config_of(run, size), model);
        train(engine, rank, size, 0, 20);
        const double diff = max_difference(engine, reference);
        // It trained (the weights moved), and each rank holds only its shard between steps.
        TinyLM initial{cohort::UnitOptions()};
        const double moved = (reference.at("h1.fc1.weight") - initial->named_parameters()["h1.fc1.weight"]).abs().max().item<double>();
        const auto memory = engine.memory_report();
        report(run.name() + " diff " + std::to_string(diff) + " moved " + std::to_string(moved) + " parameter bytes " +
               std::to_string(memory.parameter_bytes) + " of " + std::to_string(memory.num_parameters * 4));
        EXPECT_LT(diff, 1e-5) << run.name();
        EXPECT_GT(moved, 1e-3) << run.name();
        EXPECT_LT(memory.parameter_bytes, memory.num_parameters * 4 / size + 64 * 4) << run.name();
        EXPECT_EQ(memory.buffer_bytes, 0) << run.name() << ": something stayed gathered after the step";
      }
}

void print_reports(const std::vector<cohort::testing::RankResult>& results) {
  for (const auto& r : results)
    for (const auto& line : r.reports) std::printf("rank %d: %s\n", r.rank, line.c_str());
}

TEST(FullyShard, UnitsOfAnyModuleEqualOneProcessOnTwoRanks) { print_reports(run_ranks(2, equivalence_body)); }
TEST(FullyShard, UnitsOfAnyModuleEqualOneProcessOnFourRanks) { print_reports(run_ranks(4, equivalence_body)); }

struct StackImpl : torch::nn::Module {
  StackImpl() {
    torch::manual_seed(6);
    const auto recompute = cohort::UnitOptions().activation_checkpointing(true);
    a = cohort::fully_shard(register_module("a", torch::nn::Linear(4, 4)), recompute);
    b = cohort::fully_shard(register_module("b", torch::nn::Linear(4, 4)), recompute);
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::tanh(a(x))); }
  cohort::Unit<torch::nn::LinearImpl> a, b;
};

TEST(FullyShard, RecomputedUnitsUnderDdpEqualOneProcess) {
  // DDP finishes its reduction when backward ends: the recomputation's inner backward must not end it.
  print_reports(run_ranks(2, [](int rank, int size) {
    cohort::init();
    const Variant run{false, true, true};
    auto reference = train_reference(run, size, 5);
    TinyLM model{cohort::UnitOptions().activation_checkpointing(true)};
    model->eval();
    cohort::DistributedDataParallel ddp(model.ptr(), cohort::DDPOptions().find_unused_parameters(true));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < 5; ++step) {
      auto [tokens, mask, target] = global_batch(step, size);
      auto mine = [&](const torch::Tensor& t) { return t.narrow(0, rank * kBatch, kBatch); };
      opt.zero_grad();
      loss_of(ddp->forward(mine(tokens), mine(mask)), mine(target)).backward();
      for (auto& p : model->parameters())
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      opt.step();
    }
    double worst = 0;
    for (const auto& item : model->named_parameters())
      worst = std::max(worst, (item.value() - reference.at(item.key())).abs().max().item<double>());
    report("ddp recompute diff " + std::to_string(worst));
    EXPECT_LT(worst, 1e-5);
    // Every gradient comes from inside a recomputation here: the first one DDP sees is produced by
    // an inner backward, so DDP's end-of-backward callback is queued there.
    auto stack = std::make_shared<StackImpl>();
    auto single = std::make_shared<StackImpl>();
    cohort::DistributedDataParallel stacked(stack);
    torch::manual_seed(8);
    auto x = torch::randn({2 * size, 4});
    stacked->forward(x.narrow(0, 2 * rank, 2)).pow(2).mean().backward();
    single->forward(x).pow(2).mean().backward();
    for (size_t i = 0; i < stack->parameters().size(); ++i)
      EXPECT_TRUE(stack->parameters()[i].grad().allclose(single->parameters()[i].grad(), 1e-6, 1e-7)) << "parameter " << i;
  }));
}

TEST(FullyShard, CheckpointFromFourRanksResumesOnTwo) {
  namespace fs = std::filesystem;
  cohort::testing::RanksOptions options;
  const std::string root = cohort::testing::shared_temp_dir(options, "FSDP_CKPT", "cohort-fsdp-");
  const Variant run{true, true, false};
  run_ranks(4, [&](int rank, int size) {
    cohort::init();
    TinyLM model{cohort::UnitOptions()};
    model->eval();
    auto engine = cohort::initialize(config_of(run, 2), model);  // the global batch of 2 ranks x 2 rows...
    // ... is 4 ranks x 1 row: the batch math below keeps the global batch.
    for (int step = 0; step < 6; ++step) {
      auto [tokens, mask, target] = global_batch(step, 2);
      auto mine = [&](const torch::Tensor& t) { return t.narrow(0, rank, 1); };
      engine.backward(loss_of(engine.forward(mine(tokens), mine(mask)), mine(target)));
      engine.step();
    }
    cohort::CheckpointState state;
    state.add("engine", engine).rng(false);
    cohort::save_checkpoint(std::string(std::getenv("FSDP_CKPT")) + "/ckpt", state.set_step(6));
  }, options);
  run_ranks(2, [&](int rank, int size) {
    cohort::init();
    auto reference = train_reference(run, 2, 12);
    TinyLM model{cohort::UnitOptions()};
    model->eval();
    auto engine = cohort::initialize(config_of(run, size), model);
    cohort::CheckpointState state;
    state.add("engine", engine).rng(false);
    ASSERT_TRUE(cohort::load_checkpoint(std::string(std::getenv("FSDP_CKPT")) + "/ckpt", state).has_value());
    train(engine, rank, size, 6, 12);
    const double diff = max_difference(engine, reference);
    report("resumed diff " + std::to_string(diff));
    EXPECT_LT(diff, 1e-5);
  }, options);
}

// ---- refusals ----

struct TwiceImpl : torch::nn::Module {
  TwiceImpl() { block = cohort::fully_shard(register_module("block", torch::nn::Linear(3, 3))); }
  torch::Tensor forward(torch::Tensor x) { return block(block(x)); }
  cohort::Unit<torch::nn::LinearImpl> block;
};

struct TiedAcrossImpl : torch::nn::Module {
  TiedAcrossImpl() {
    auto shared = torch::nn::Linear(3, 3);
    a = cohort::fully_shard(register_module("a", torch::nn::Sequential(shared)));
    b = cohort::fully_shard(register_module("b", torch::nn::Sequential(shared)));
  }
  torch::Tensor forward(torch::Tensor x) { return b(a(x)); }
  cohort::Unit<torch::nn::SequentialImpl> a, b;
};

cohort::ZeroConfig sgd3() {
  return cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(3)).optimizer(
      cohort::OptimizerConfig().type(cohort::OptimizerType::kSgd).lr(0.1));
}

TEST(FullyShard, RefusalsNameTheUnitAndTheFix) {
  run_ranks(1, [](int, int) {
    cohort::init();
    auto twice = std::make_shared<TwiceImpl>();
    auto engine = cohort::initialize(sgd3(), twice);
    EXPECT_EQ(cohort::testing::error_of([&] { engine.forward(torch::ones({1, 3}, torch::requires_grad())); }),
              "ZeRO stage 3: unit 'block' ran twice in one forward; a unit's gradients are reduced when "
              "its backward ends, so it may run once per step: give each use a unit of its own, or leave the "
              "module in its parent's unit");
    EXPECT_EQ(cohort::testing::error_of([&] { twice->forward(torch::ones({1, 3})); }),
              "ZeRO stage 3: unit 'block' ran outside engine.forward(); call the model through the "
              "engine (engine.forward(...) or engine.run_forward(fn)) so the parameters outside the units are "
              "gathered too");
    EXPECT_EQ(cohort::testing::error_of([] { cohort::initialize(sgd3(), std::make_shared<TiedAcrossImpl>()); }),
              "ZeRO stage 3: parameter 'b.0.weight' is the same tensor as 'a.0.weight', but they belong "
              "to different units ('b' and 'a'); a shared parameter must live in one unit: mark their common "
              "parent instead, or leave the modules that share it outside the units (the root)");
    EXPECT_THAT(cohort::testing::error_of([] {
      cohort::parse_ds_config(R"({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}})", 1);
    }), ::testing::HasSubstr("zero_optimization.stage3_gather_16bit_weights_on_model_save"));
    EXPECT_THAT(cohort::testing::error_of([] {
      cohort::parse_ds_config(R"({"activation_checkpointing": {"partition_activations": true}})", 1);
    }), ::testing::HasSubstr("activation_checkpointing.partition_activations"));
    // Under no_grad (evaluation) a unit may run twice, and nothing stays gathered.
    torch::NoGradGuard no_grad;
    EXPECT_EQ(engine.forward(torch::ones({1, 3})).sizes(), (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(engine.memory_report().buffer_bytes, 0);
  });
}

}  // namespace

}  // namespace fsdp_test
