// HSDP on 4 real rank processes: the ZeRO engine sharding over one axis of a {replicate 2, shard 2}
// mesh and allreducing each gradient shard over the other ends, at every stage, at the parameters
// of DDP over all 4 ranks; its checkpoint is written once per shard (the replicas' copies are one)
// and loads into a flat 4-rank engine, and a flat one's into HSDP; replicas that do not pair equal
// shards are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/checkpoint.h"
#include "cohort/ddp.h"
#include "cohort/mesh.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/engine_bits.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace zero_hsdp_test {

using ::testing::HasSubstr;
using cohort::testing::report;
using cohort::testing::max_difference;
using cohort::testing::run_ranks;

namespace {

constexpr int kSteps = 12, kBatch = 3;

// 6 -> 7 -> 5 -> 3: 49, 40 and 18 elements, none divisible by the shard group of 2 ranks' padding.
torch::nn::Sequential make_model() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(6, 7), torch::nn::ReLU(), torch::nn::Linear(7, 5),
                               torch::nn::Tanh(), torch::nn::Linear(5, 3));
}

cohort::ZeroConfig config(int stage, int gas = 1, double clip = 0) {
  return cohort::ZeroConfig()
      .gradient_accumulation_steps(gas)
      .gradient_clipping(clip)
      .zero_optimization(cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(30).overlap_comm(true))
      .optimizer(cohort::OptimizerConfig().type(cohort::OptimizerType::kAdam).lr(0.01).decoupled_weight_decay(false));
}

// This rank's slice of step `step`'s global batch of 4 x kBatch samples.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank) {
  torch::manual_seed(2000 + step);
  auto x = torch::randn({4 * kBatch, 6});
  auto y = torch::randint(0, 3, {4 * kBatch}, torch::kLong);
  return {x.narrow(0, rank * kBatch, kBatch), y.narrow(0, rank * kBatch, kBatch)};
}

std::map<std::string, torch::Tensor> train_ddp(int rank, double clip) {
  auto model = make_model();
  cohort::DistributedDataParallel ddp(model);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, rank);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(x), y).backward();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), clip);
    opt.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

cohort::EngineOptions hsdp(const cohort::Mesh& mesh) {
  return cohort::EngineOptions().comm(mesh.group_ptr("shard")).replicate_comm(mesh.group_ptr("replicate"));
}

void train(cohort::ZeroEngine<torch::nn::SequentialImpl>& engine, int rank, int gas, int to = kSteps, int from = 0) {
  for (int step = from; step < to; ++step) {
    auto [x, y] = batch(step, rank);
    const int64_t micro = kBatch / gas;
    for (int m = 0; m < gas; ++m) {
      auto out = engine.forward(x.narrow(0, m * micro, micro));
      engine.backward(torch::nn::functional::cross_entropy(out, y.narrow(0, m * micro, micro)));
      engine.step();
    }
  }
}

TEST(Hsdp, EveryStageOnTwoReplicasOfTwoShardsEqualsDdpOnFour) {
  run_ranks(4, [](int rank, int size) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"replicate", 2}, {"shard", 2}});
    auto reference = train_ddp(rank, 0);
    for (int stage : {0, 1, 2, 3}) {
      auto model = make_model();
      if (rank != 0) torch::nn::init::normal_(model[0]->as<torch::nn::Linear>()->weight);  // broadcast overrides
      auto engine = cohort::initialize(config(stage), model, hsdp(mesh));
      train(engine, rank, 1);
      const double diff = max_difference(engine, reference);
      report("stage " + std::to_string(stage) + " diff " + std::to_string(diff));
      EXPECT_LT(diff, 1e-5) << "stage " << stage;
    }
    // Accumulation and clipping: the norm of the shard group's shards is the whole gradient's.
    auto clipped = train_ddp(rank, 0.05);
    for (int stage : {1, 3}) {
      auto engine = cohort::initialize(config(stage, 3, 0.05), make_model(), hsdp(mesh));
      train(engine, rank, 3);
      EXPECT_GT(engine.last_gradient_norm(), 0.05) << "clipping was active";
      EXPECT_LT(max_difference(engine, clipped), 1e-5) << "stage " << stage << " clipped";
    }
  });
}

TEST(Hsdp, CheckpointWritesEachShardOnceAndLoadsAcrossLayouts) {
  cohort::testing::RanksOptions options;
  const std::string dir = cohort::testing::shared_temp_dir(options, "HSDP_CKPT_DIR", "zero_hsdp_");
  run_ranks(4, [&](int rank, int size) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"replicate", 2}, {"shard", 2}});
    const std::string root = dir;
    auto load_into = [&](cohort::ZeroEngine<torch::nn::SequentialImpl>& engine, const std::string& dir) {
      cohort::CheckpointState state;
      state.add("engine", engine).rng(false);
      ASSERT_TRUE(cohort::load_checkpoint(dir, state, cohort::LoadOptions().must_exist(true)).has_value());
    };
    auto save = [&](cohort::ZeroEngine<torch::nn::SequentialImpl>& engine, const std::string& dir) {
      cohort::CheckpointState state;
      state.add("engine", engine).rng(false);
      cohort::save_checkpoint(dir, state.set_step(engine.global_steps()));
    };
    for (int stage : {2, 3}) {
      const std::string tag = std::to_string(stage);
      auto straight = cohort::initialize(config(stage), make_model(), hsdp(mesh));
      train(straight, rank, 1);
      // Replicas list the same slices: a save that wrote both would overlap and be refused at merge.
      auto first = cohort::initialize(config(stage), make_model(), hsdp(mesh));
      train(first, rank, 1, kSteps / 2);
      save(first, root + "/hsdp" + tag);
      auto flat = cohort::initialize(config(stage), make_model());
      load_into(flat, root + "/hsdp" + tag);
      auto a = first.full_parameters(), b = flat.full_parameters();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].second.equal(b[i].second)) << a[i].first;
      // A flat engine's checkpoint resumes under HSDP, and trains on to the uninterrupted run.
      save(flat, root + "/flat" + tag);
      auto resumed = cohort::initialize(config(stage), make_model(), hsdp(mesh));
      load_into(resumed, root + "/flat" + tag);
      train(resumed, rank, 1, kSteps, kSteps / 2);
      auto s = straight.full_parameters(), r = resumed.full_parameters();
      for (size_t i = 0; i < s.size(); ++i)
        EXPECT_LT((s[i].second - r[i].second).abs().max().item<double>(), 1e-6) << "stage " << stage << s[i].first;
    }
  }, options);
}

TEST(Hsdp, ReplicasThatDoNotPairEqualShardsAreRefused) {
  run_ranks(4, [](int rank, int size) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"replicate", 2}, {"shard", 2}});
    // The world as the replicate group: its ranks hold shards 0, 1, 0, 1.
    const std::string error = cohort::testing::error_of([&] {
      cohort::initialize(config(2), make_model(), cohort::EngineOptions().comm(mesh.group_ptr("shard"))
                                                      .replicate_comm(world.comm_ptr()));
    });
    const int shard = mesh.coordinate("shard");
    EXPECT_THAT(error, HasSubstr("EngineOptions::replicate_comm: its rank " + std::to_string(1 - shard) + " is rank " +
                                 std::to_string(1 - shard) + " of a shard group of 2, this rank is rank " +
                                 std::to_string(shard) + " of 2: replicas must hold the same shard"));
  });
}

}  // namespace

}  // namespace zero_hsdp_test
