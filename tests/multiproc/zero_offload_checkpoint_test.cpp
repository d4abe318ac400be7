// A checkpoint of an engine whose optimizer state is on NVMe streams it: a save or a load lends one
// group at a time (Stateful::lend_part), so the state in memory stays within the window the step
// uses (offload_optimizer.buffer_count groups read ahead) instead of the whole state of the rank.
// The files are the bytes a save without offload writes, and they resume where an unbroken run ends,
// at the same world size and at another.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cohort/checkpoint.h"
#include "cohort/fsdp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/engine_bits.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace zero_offload_checkpoint_test {

namespace fs = std::filesystem;
using cohort::testing::expect_equal_bits;
using cohort::testing::parameters_of;
using cohort::testing::RanksOptions;
using cohort::testing::run_ranks;

namespace {

constexpr int kSteps = 6;
using Engine = cohort::ZeroEngine<torch::nn::SequentialImpl>;

// Six Linear layers, each a sharding unit: six groups of state.
torch::nn::Sequential make_model() {
  torch::manual_seed(11);
  torch::nn::Sequential model;
  for (int i = 0; i < 5; ++i) {
    model->push_back(torch::nn::Linear(8, 8));
    model->push_back(torch::nn::Tanh());
  }
  model->push_back(torch::nn::Linear(8, 3));
  return model;
}

// buffer_count 1: the step (and now a checkpoint) holds one group and reads one slot ahead.
Engine make_engine(cohort::OffloadDevice device, const std::string& nvme) {
  auto offload = cohort::OffloadOptimizerConfig().device(device).nvme_path(nvme).buffer_count(1);
  auto config = cohort::ZeroConfig()
                    .zero_optimization(cohort::ZeroOptimizationConfig().stage(3).offload_optimizer(offload))
                    .aio(cohort::AioConfig().block_size(4096).queue_depth(4))
                    .optimizer(
                        cohort::OptimizerConfig().type(cohort::OptimizerType::kAdamW).lr(0.02).weight_decay(0.01));
  return cohort::initialize(config, make_model(), cohort::EngineOptions().unit_policy(cohort::sequential_children()));
}

void train(Engine& engine, int first, int last, int rank, int size) {
  for (int step = first; step < last; ++step) {
    torch::manual_seed(900 + step);
    auto x = torch::randn({12, 8});
    auto y = torch::randint(0, 3, {12}, torch::kLong);
    const int64_t per_rank = 12 / size;
    auto out = engine.forward(x.narrow(0, rank * per_rank, per_rank));
    engine.backward(torch::nn::functional::cross_entropy(out, y.narrow(0, rank * per_rank, per_rank)));
    engine.step();
  }
}


// The engine as a Stateful, every call passed on, that records the optimizer bytes the engine holds
// whenever the checkpoint layer may be holding its state: after listing it, after each part lent.
class Watched : public cohort::Stateful {
 public:
  explicit Watched(cohort::ZeroEngineCore& engine) : engine_(engine) {}
  void prepare_load() override { engine_.prepare_load(); }
  std::vector<cohort::StateTensor> state_tensors() override {
    auto out = engine_.state_tensors();
    watch();
    return out;
  }
  std::vector<cohort::StateTensor> lend_part(int64_t part) override {
    auto out = engine_.lend_part(part);
    parts.push_back(part);
    watch();
    return out;
  }
  void give_back_part(int64_t part, bool changed) override { engine_.give_back_part(part, changed); }
  cohort::StateValues state_values() const override { return engine_.state_values(); }
  void check_state_values(const cohort::StateValues& values, int saved_world_size) const override {
    engine_.check_state_values(values, saved_world_size);
  }
  void load_state_values(const cohort::StateValues& values) override {
    engine_.load_state_values(values);
    watch();
  }

  int64_t peak = 0;
  std::vector<int64_t> parts;  // in the order they were lent

 private:
  void watch() { peak = std::max(peak, engine_.memory_report().optimizer_bytes); }
  cohort::ZeroEngineCore& engine_;
};

int64_t groups_of(cohort::ZeroEngineCore& engine) {
  int64_t groups = 0;
  for (const auto& t : engine.state_tensors())
    groups += t.name.size() > 7 && t.name.substr(t.name.size() - 7) == ".master";
  return groups;
}

// At most the lent group and one slot read ahead or written behind (buffer_count 1): two groups'
// share of the swap file (which holds each group's gradient shard too), against six held before.
void expect_within_window(cohort::ZeroEngineCore& engine, const Watched& watched, const std::string& what) {
  const int64_t groups = groups_of(engine);
  ASSERT_GE(groups, 6) << what;
  const int64_t window = 2 * engine.memory_report().file_bytes / groups;
  EXPECT_GT(watched.peak, 0) << what << ": nothing was lent";
  EXPECT_LE(watched.peak, window) << what << ": " << watched.peak << " bytes of optimizer state in memory at once";
  std::vector<int64_t> in_order;
  for (int64_t g = 0; g < groups; ++g) in_order.push_back(g);
  EXPECT_EQ(watched.parts, in_order) << what << ": each group lent once, in order";
  EXPECT_LE(engine.memory_report().optimizer_bytes, window) << what << ": state held after it returned";
}

std::string root() { return std::getenv("OFFLOAD_ROOT"); }

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string shard_of(const std::string& dir, int rank, int size) {
  char name[64];
  std::snprintf(name, sizeof name, "/step-%d/shard-%05d-of-%05d.bin", kSteps / 2, rank, size);
  return dir + name;
}

// World 2: half the steps with and without offload, each saved; the shards are the same bytes; a
// fresh engine on NVMe loads and trains on to the parameters of the unbroken run without offload.
void save_and_resume(int rank, int size, const std::string& nvme) {
  auto plain = make_engine(cohort::OffloadDevice::kNone, "");
  train(plain, 0, kSteps / 2, rank, size);
  cohort::CheckpointState plain_state;
  plain_state.add("engine", plain);
  cohort::save_checkpoint(root() + "/plain", plain_state.set_step(kSteps / 2));
  if (rank == 0) torch::save(parameters_of(plain), root() + "/saved.pt");
  else parameters_of(plain);  // a collective
  train(plain, kSteps / 2, kSteps, rank, size);
  const auto want = parameters_of(plain);
  {
    auto first = make_engine(cohort::OffloadDevice::kNvme, nvme);
    train(first, 0, kSteps / 2, rank, size);
    Watched watched(first);
    cohort::CheckpointState state;
    state.add("engine", watched);
    cohort::save_checkpoint(root() + "/nvme", state.set_step(kSteps / 2));
    expect_within_window(first, watched, "save");
    EXPECT_EQ(bytes_of(shard_of(root() + "/nvme", rank, size)), bytes_of(shard_of(root() + "/plain", rank, size)))
        << "the shard saved with offload differs from the one saved without";
    train(first, kSteps / 2, kSteps, rank, size);
    expect_equal_bits(parameters_of(first), want, "trained on after the save");
  }
  auto resumed = make_engine(cohort::OffloadDevice::kNvme, nvme);
  Watched watched(resumed);
  cohort::CheckpointState state;
  state.add("engine", watched);
  ASSERT_TRUE(cohort::load_checkpoint(root() + "/nvme", state, cohort::LoadOptions().must_exist(true)));
  expect_within_window(resumed, watched, "load");
  train(resumed, kSteps / 2, kSteps, rank, size);
  expect_equal_bits(parameters_of(resumed), want, "resumed on nvme");
}

// World 1: the checkpoint two ranks saved, each group read from both ranks' shards, loads into the
// parameters they had.
void load_resharded(const std::string& nvme) {
  auto engine = make_engine(cohort::OffloadDevice::kNvme, nvme);
  Watched watched(engine);
  cohort::CheckpointState state;
  state.add("engine", watched);
  ASSERT_TRUE(cohort::load_checkpoint(root() + "/nvme", state, cohort::LoadOptions().must_exist(true)));
  expect_within_window(engine, watched, "load at world 1");
  std::vector<torch::Tensor> saved;
  torch::load(saved, root() + "/saved.pt");
  expect_equal_bits(parameters_of(engine), saved, "loaded at world 1");
}

void body(int rank, int size) {
  cohort::init();
  const std::string nvme = root() + "/swap" + std::to_string(size) + "-" + std::to_string(rank);
  fs::create_directories(nvme);
  if (size == 2) save_and_resume(rank, size, nvme);
  else load_resharded(nvme);
}

}  // namespace

TEST(ZeroOffloadCheckpoint, ASaveAndALoadLendOneGroupAtATimeAndKeepTheFormat) {
  RanksOptions options;
  options.deadline = std::chrono::seconds(180);
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-stream-");
  for (int world : {2, 1}) run_ranks(world, body, options);
}

}  // namespace zero_offload_checkpoint_test
