// The ZeRO engine with its optimizer offloaded (ZeRO-Offload, ZeRO-Infinity): masters and optimizer
// state on the host or in swap files under nvme_path, stepped a group at a time. Each run ends with
// the bits of the same run without offload (the host step is the same LibTorch arithmetic over the
// same flat shards), a checkpoint taken with offload resumes with or without it, the swap files go
// with the engine, and a swap file removed under the job is one I/O error naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cohort/checkpoint.h"
#include "cohort/error.h"
#include "cohort/fsdp.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "support/engine_bits.h"
#include "support/multiproc.h"
#include "support/open_files.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace zero_offload_test {

namespace fs = std::filesystem;
using cohort::testing::expect_equal_bits;
using cohort::testing::parameters_of;
using cohort::testing::RanksOptions;
using cohort::testing::run_ranks;
using ::testing::HasSubstr;

namespace {

constexpr int kSteps = 20;

// 6 -> 7 -> 5 -> 3: 49, 40 and 18 elements, no size divisible by the world size.
torch::nn::Sequential make_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(6, 7), torch::nn::ReLU(), torch::nn::Linear(7, 5), torch::nn::Tanh(),
                               torch::nn::Linear(5, 3));
}

cohort::OptimizerConfig optimizer_of(cohort::OptimizerType type) {
  return cohort::OptimizerConfig().type(type).lr(0.02).momentum(0.9).weight_decay(0.01);
}

// buffer_count 1: every group is read and written through one buffer, so each step swaps.
cohort::ZeroConfig config_of(int stage, cohort::OptimizerType type, cohort::OffloadDevice device,
                             const std::string& nvme_path) {
  auto offload = cohort::OffloadOptimizerConfig().device(device).nvme_path(nvme_path).buffer_count(1);
  return cohort::ZeroConfig()
      .zero_optimization(
          cohort::ZeroOptimizationConfig().stage(stage).reduce_bucket_size(30).offload_optimizer(offload))
      .aio(cohort::AioConfig().block_size(4096).queue_depth(4))
      .optimizer(optimizer_of(type));
}

void train(cohort::ZeroEngine<torch::nn::SequentialImpl>& engine, int first, int last, int rank, int size) {
  for (int step = first; step < last; ++step) {
    torch::manual_seed(700 + step);
    auto x = torch::randn({12, 6});
    auto y = torch::randint(0, 3, {12}, torch::kLong);
    const int64_t per_rank = 12 / size;
    auto out = engine.forward(x.narrow(0, rank * per_rank, per_rank));
    engine.backward(torch::nn::functional::cross_entropy(out, y.narrow(0, rank * per_rank, per_rank)));
    engine.step();
  }
}


std::string swap_dir(int rank) { return std::string(std::getenv("OFFLOAD_ROOT")) + "/nvme" + std::to_string(rank); }

// The swap files are unlinked at once: the directory stays empty, the open descriptors say what lives.
size_t files_in(const std::string& dir) {
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
  return cohort::testing::open_files_under(dir);
}

void equal_bits_body(int rank, int size) {
  cohort::init();
  const std::string nvme = swap_dir(rank);
  fs::create_directories(nvme);
  for (auto type : {cohort::OptimizerType::kAdamW, cohort::OptimizerType::kSgd}) {
    for (int stage : {1, 2, 3}) {
      auto plain = cohort::initialize(config_of(stage, type, cohort::OffloadDevice::kNone, ""), make_model());
      train(plain, 0, kSteps, rank, size);
      const auto want = parameters_of(plain);
      for (auto device : {cohort::OffloadDevice::kCpu, cohort::OffloadDevice::kNvme}) {
        const std::string what = "stage " + std::to_string(stage) +
                                 (type == cohort::OptimizerType::kSgd ? " SGD" : " AdamW") +
                                 (device == cohort::OffloadDevice::kNvme ? " nvme" : " cpu");
        {
          auto offloaded = cohort::initialize(config_of(stage, type, device, nvme), make_model());
          train(offloaded, 0, kSteps, rank, size);
          expect_equal_bits(parameters_of(offloaded), want, what);
          const auto memory = offloaded.memory_report();
          if (device == cohort::OffloadDevice::kNvme) {
            // Masters and two moments (AdamW) or one buffer (SGD) of this rank's shard are on file.
            EXPECT_GE(memory.file_bytes, 4 * memory.num_parameters / size) << what;
            EXPECT_EQ(files_in(nvme), 1u) << what;
          }
        }
        EXPECT_EQ(files_in(nvme), 0u) << what << ": the swap file outlived its engine";
      }
    }
  }
}

}  // namespace

TEST(ZeroOffload, OptimizerOnTheHostOrNvmeEndsAtTheBitsOfNoOffload) {
  RanksOptions options;
  options.deadline = std::chrono::seconds(240);
  const std::string root = cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-");
  for (int world : {1, 2}) run_ranks(world, equal_bits_body, options);
}

namespace {

std::string checkpoint_dir() { return std::string(std::getenv("OFFLOAD_ROOT")) + "/ckpt"; }

// 10 steps with the optimizer on NVMe, saved; a fresh engine (NVMe, or no offload) loads and trains
// 10 more: the parameters of 20 steps without a break.
void resume_body(int rank, int size) {
  cohort::init();
  const std::string nvme = swap_dir(rank);
  fs::create_directories(nvme);
  const auto adam = cohort::OptimizerType::kAdamW;
  auto straight = cohort::initialize(config_of(3, adam, cohort::OffloadDevice::kNone, ""), make_model());
  train(straight, 0, kSteps, rank, size);
  const auto want = parameters_of(straight);
  {
    auto first = cohort::initialize(config_of(3, adam, cohort::OffloadDevice::kNvme, nvme), make_model());
    train(first, 0, kSteps / 2, rank, size);
    cohort::CheckpointState state;
    state.add("engine", first);
    cohort::save_checkpoint(checkpoint_dir(), state.set_step(first.global_steps()));
    train(first, kSteps / 2, kSteps, rank, size);  // a save leaves the state on file as it was
    expect_equal_bits(parameters_of(first), want, "trained on after the save");
  }
  for (auto device : {cohort::OffloadDevice::kNvme, cohort::OffloadDevice::kNone}) {
    auto resumed = cohort::initialize(config_of(3, adam, device, nvme), make_model());
    cohort::CheckpointState state;
    state.add("engine", resumed);
    ASSERT_TRUE(cohort::load_checkpoint(checkpoint_dir(), state, cohort::LoadOptions().must_exist(true)));
    train(resumed, kSteps / 2, kSteps, rank, size);
    expect_equal_bits(parameters_of(resumed), want,
                      device == cohort::OffloadDevice::kNvme ? "resumed on nvme" : "resumed without offload");
  }
}

}  // namespace

namespace {

// Stage 3 with each Linear its own unit; offload_param on `params` (buffer_count 1: one unit read
// ahead; max_in_cpu 0: every unit on file) and offload_optimizer on `optimizer`.
cohort::ZeroEngine<torch::nn::SequentialImpl> stage3_engine(cohort::OptimizerType type, cohort::OffloadDevice params,
                                                            cohort::OffloadDevice optimizer, const std::string& nvme) {
  auto config = config_of(3, type, optimizer, nvme);
  config.zero_optimization().offload_param(
      cohort::OffloadParamConfig().device(params).nvme_path(nvme).buffer_count(1).max_in_cpu(0));
  return cohort::initialize(config, make_model(), cohort::EngineOptions().unit_policy(cohort::sequential_children()));
}

const char* name_of(cohort::OffloadDevice device) {
  return device == cohort::OffloadDevice::kNvme ? "nvme" : device == cohort::OffloadDevice::kCpu ? "cpu" : "none";
}

void parameter_offload_body(int rank, int size) {
  cohort::init();
  const std::string nvme = swap_dir(rank);
  fs::create_directories(nvme);
  using cohort::OffloadDevice;
  for (auto type : {cohort::OptimizerType::kAdamW, cohort::OptimizerType::kSgd}) {
    auto plain = stage3_engine(type, OffloadDevice::kNone, OffloadDevice::kNone, "");
    train(plain, 0, kSteps, rank, size);
    const auto want = parameters_of(plain);
    for (auto params : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
      for (auto optimizer : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
        const std::string what = std::string(type == cohort::OptimizerType::kSgd ? "SGD" : "AdamW") + ", params " +
                                 name_of(params) + ", optimizer " + name_of(optimizer);
        {
          auto offloaded = stage3_engine(type, params, optimizer, nvme);
          train(offloaded, 0, kSteps, rank, size);
          expect_equal_bits(parameters_of(offloaded), want, what);
          if (params == OffloadDevice::kNvme) {
            // Between steps every shard is on file: none is counted in memory.
            const auto memory = offloaded.memory_report();
            EXPECT_EQ(memory.parameter_bytes, 0) << what;
            EXPECT_GE(memory.file_bytes, 4 * memory.num_parameters / size) << what;
            EXPECT_EQ(files_in(nvme), optimizer == OffloadDevice::kNvme ? 2u : 1u) << what;
          }
        }
        EXPECT_EQ(files_in(nvme), 0u) << what << ": a swap file outlived its engine";
      }
    }
  }
}

// Saved with parameters and optimizer on NVMe, loaded by an engine without offload and by one with
// it: both train on to the parameters of the run without a break.
void parameter_resume_body(int rank, int size) {
  cohort::init();
  const std::string nvme = swap_dir(rank);
  fs::create_directories(nvme);
  using cohort::OffloadDevice;
  const auto adam = cohort::OptimizerType::kAdamW;
  auto straight = stage3_engine(adam, OffloadDevice::kNone, OffloadDevice::kNone, "");
  train(straight, 0, kSteps, rank, size);
  const auto want = parameters_of(straight);
  {
    auto first = stage3_engine(adam, OffloadDevice::kNvme, OffloadDevice::kNvme, nvme);
    train(first, 0, kSteps / 2, rank, size);
    cohort::CheckpointState state;
    state.add("engine", first);
    cohort::save_checkpoint(checkpoint_dir(), state.set_step(first.global_steps()));
  }
  for (auto device : {OffloadDevice::kNvme, OffloadDevice::kNone}) {
    auto resumed = stage3_engine(adam, device, device, nvme);
    cohort::CheckpointState state;
    state.add("engine", resumed);
    ASSERT_TRUE(cohort::load_checkpoint(checkpoint_dir(), state, cohort::LoadOptions().must_exist(true)));
    train(resumed, kSteps / 2, kSteps, rank, size);
    expect_equal_bits(parameters_of(resumed), want, std::string("resumed with offload ") + name_of(device));
  }
}

}  // namespace

TEST(ZeroOffload, ParametersOnTheHostOrNvmeEndAtTheBitsOfNoOffload) {
  RanksOptions options;
  options.deadline = std::chrono::seconds(240);
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-param-");
  for (int world : {1, 2}) run_ranks(world, parameter_offload_body, options);
}

namespace {

// Gradient shards on file (stage 2/3, an nvme optimizer on the CPU) over accumulation and clipping:
// the second micro-step reads the shard back and adds, the norm pass reads every shard once more.
void accumulated_body(int rank, int size) {
  cohort::init();
  const std::string nvme = swap_dir(rank);
  fs::create_directories(nvme);
  for (int stage : {2, 3}) {
    auto config_with = [&](cohort::OffloadDevice device) {
      auto config = config_of(stage, cohort::OptimizerType::kAdamW, device, nvme);
      return config.gradient_accumulation_steps(2).gradient_clipping(0.05);
    };
    auto plain = cohort::initialize(config_with(cohort::OffloadDevice::kNone), make_model());
    train(plain, 0, kSteps, rank, size);
    auto offloaded = cohort::initialize(config_with(cohort::OffloadDevice::kNvme), make_model());
    train(offloaded, 0, kSteps, rank, size);
    const std::string what = "stage " + std::to_string(stage) + ", 2 micro-steps a step, clipped";
    expect_equal_bits(parameters_of(offloaded), parameters_of(plain), what);
    EXPECT_EQ(offloaded.memory_report().gradient_bytes, 0) << what << ": the gradient shards are on file";
    EXPECT_NEAR(offloaded.last_gradient_norm(), plain.last_gradient_norm(), 1e-7) << what;
  }
}

}  // namespace

TEST(ZeroOffload, GradientsOnFileAccumulateAndClipAsInMemory) {
  RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-accumulate-");
  run_ranks(2, accumulated_body, options);
}

TEST(ZeroOffload, ACheckpointWithParametersOnNvmeResumesWithOrWithoutOffload) {
  RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-param-resume-");
  run_ranks(2, parameter_resume_body, options);
}

TEST(ZeroOffload, ACheckpointTakenOnNvmeResumesWithOrWithoutOffload) {
  RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-resume-");
  run_ranks(2, resume_body, options);
}

TEST(ZeroOffload, AnNvmePathThatIsNotADirectoryIsRefusedNamingTheKey) {
  run_ranks(1, [](int, int) {
    cohort::init();
    try {
      cohort::initialize(config_of(2, cohort::OptimizerType::kAdamW, cohort::OffloadDevice::kNvme, "/proc/version"),
                         make_model());
      ADD_FAILURE() << "no error";
    } catch (const cohort::Error& e) {
      EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("offload_optimizer.nvme_path \"/proc/version\" is not a directory (rank 0)"));
    }
  });
}

TEST(ZeroOffload, AUnitShardLargerThanTheParamBufferIsRefusedNamingBufferSize) {
  RanksOptions options;
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-buffer-");
  run_ranks(
      1,
      [](int, int) {
        cohort::init();
        const std::string dir = swap_dir(0);
        fs::create_directories(dir);
        auto config = config_of(3, cohort::OptimizerType::kAdamW, cohort::OffloadDevice::kNone, "");
        config.zero_optimization().offload_param(cohort::OffloadParamConfig()
                                                     .device(cohort::OffloadDevice::kNvme)
                                                     .nvme_path(dir)
                                                     .buffer_size(40)
                                                     .max_in_cpu(0));
        try {
          cohort::initialize(config, make_model(), cohort::EngineOptions().unit_policy(cohort::sequential_children()));
          ADD_FAILURE() << "no error";
        } catch (const cohort::Error& e) {
          EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument) << e.what();
          // The first Linear (6 -> 7: 49 elements) is the first unit past the root's (empty) group.
          EXPECT_THAT(e.what(), HasSubstr("parameter shard has 49 elements on rank 0, more than a buffer holds (40); "
                                          "raise buffer_size or mark smaller sharding units"));
          EXPECT_THAT(e.what(), HasSubstr("zero_optimization.offload_param.buffer_size"));
        }
      },
      options);
}

// DeepSpeed's sub_group_size bounds what the optimizer steps and swaps at a time; cohort's sub-group
// is a unit's shard, so a larger unit is refused (stage 3, optimizer on nvme).
TEST(ZeroOffload, AUnitShardLargerThanASubGroupIsRefusedNamingSubGroupSize) {
  RanksOptions options;
  cohort::testing::shared_temp_dir(options, "OFFLOAD_ROOT", "cohort-offload-subgroup-");
  run_ranks(
      1,
      [](int, int) {
        cohort::init();
        const std::string dir = swap_dir(0);
        fs::create_directories(dir);
        auto config = config_of(3, cohort::OptimizerType::kAdamW, cohort::OffloadDevice::kNvme, dir);
        config.zero_optimization().sub_group_size(45);
        try {
          cohort::initialize(config, make_model(), cohort::EngineOptions().unit_policy(cohort::sequential_children()));
          ADD_FAILURE() << "no error";
        } catch (const cohort::Error& e) {
          EXPECT_EQ(e.kind(), cohort::ErrorKind::kInvalidArgument) << e.what();
          EXPECT_THAT(e.what(), HasSubstr("zero_optimization.sub_group_size: group 0's shard has 49 elements on rank 0, "
                                          "more than a sub-group (45): cohort steps and swaps one sharding unit's "
                                          "shard at a time; raise sub_group_size or mark smaller sharding units"));
        }
        // Units within the bound (49 elements the largest) train as before.
        config.zero_optimization().sub_group_size(49);
        auto engine =
            cohort::initialize(config, make_model(), cohort::EngineOptions().unit_policy(cohort::sequential_children()));
        train(engine, 0, 2, 0, 1);
      },
      options);
}

}  // namespace zero_offload_test
