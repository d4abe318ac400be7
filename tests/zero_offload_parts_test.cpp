// The offload parts of the ZeRO engine, alone and without ranks: stage 3's parameter shards
// (src/zero/offload/parameter_shards.h) on each tier, max_in_cpu and the step's write-back; the
// optimizer's swap file (src/zero/offload/optimizer_file.h), a no-op without nvme, masters and
// gradients put on file and lent back with their values, a clean gradient lent as zeros; the host
// staging of offload on a GPU (src/zero/offload/host_staging.h), here with CPU tensors: chunks of a
// bounded slot size, copied or added into fp32, cast on the way up; the fused host Adam/AdamW
// (src/zero/host_adam.h) against LibTorch's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/open_files.h"
#include "zero/engine_settings.h"
#include "compat/optimizer_state.h"
#include "zero/host_adam.h"
#include "zero/offload/host_staging.h"
#include "zero/offload/optimizer_file.h"
#include "zero/offload/parameter_shards.h"

namespace zero_offload_parts_test {

namespace detail = cohort::detail;
namespace fs = std::filesystem;
using cohort::OffloadDevice;

namespace {

struct Dir {
  Dir() {
    std::string pattern = (fs::temp_directory_path() / "cohort-offload-parts-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~Dir() { fs::remove_all(path); }
  size_t files() const { return cohort::testing::open_files_under(path); }  // the swap files are unlinked
  std::string path;
};

detail::EngineSettings settings_of(int stage, detail::Tier params, detail::Tier masters, const std::string& dir,
                                   int64_t max_in_cpu = 0) {
  detail::EngineSettings s;
  s.stage = stage;
  s.placement.parameter_shards = params;
  s.placement.masters = masters;
  s.config.aio(cohort::AioConfig().block_size(4096).queue_depth(2));
  s.config.zero_optimization()
      .offload_param(cohort::OffloadParamConfig().nvme_path(dir).buffer_count(1).max_in_cpu(max_in_cpu))
      .offload_optimizer(cohort::OffloadOptimizerConfig().nvme_path(dir).buffer_count(1));
  return s;
}

}  // namespace

TEST(ZeroParameterShards, WithoutOffloadTheShardItselfAndOnTheHostInMemory) {
  const auto device = settings_of(3, detail::Tier::kDevice, detail::Tier::kDevice, "");
  detail::ParameterShards shards(device);
  const torch::Tensor shard = torch::arange(5, torch::kFloat);
  shards.add(shard);
  EXPECT_TRUE(shards.lend(0).is_same(shard));
  EXPECT_FALSE(shards.on_file(0));
  shards.write(0, torch::full({5}, 2.0));
  EXPECT_EQ(shard.sum().item<float>(), 10.0f) << "written in place";
  cohort::MemoryReport report;
  shards.add_memory(report);
  EXPECT_EQ(report.parameter_bytes, 20);
  EXPECT_EQ(report.file_bytes, 0);
}

TEST(ZeroParameterShards, OnFileBeyondMaxInCpuReadBackAndWritten) {
  Dir dir;
  const auto settings = settings_of(3, detail::Tier::kFile, detail::Tier::kDevice, dir.path, /*max_in_cpu=*/4);
  detail::ParameterShards shards(settings);
  shards.add(torch::arange(3, torch::kFloat));       // 3 <= 4: stays in memory
  shards.add(torch::arange(10, 16, torch::kFloat));  // 3 + 6 > 4: on file
  EXPECT_FALSE(shards.on_file(0));
  EXPECT_TRUE(shards.on_file(1));
  EXPECT_EQ(dir.files(), 1u);
  shards.flush();  // the write of the shard put on file is done: its buffer goes
  cohort::MemoryReport between;
  shards.add_memory(between);
  EXPECT_EQ(between.parameter_bytes, 12) << "only the shard kept in memory";
  EXPECT_GE(between.file_bytes, 24);

  shards.prefetch(1);
  EXPECT_TRUE(torch::equal(shards.lend(1), torch::arange(10, 16, torch::kFloat)));
  shards.give_back(1);
  EXPECT_EQ(shards.lend(1).numel(), 6);
  shards.give_back(1);
  shards.write(1, torch::full({6}, 7.0, torch::kDouble));  // the master's dtype need not be the shard's
  shards.flush();
  EXPECT_TRUE(torch::equal(shards.lend(1), torch::full({6}, 7.0)));
  shards.give_back(1);
}

TEST(ZeroOptimizerFile, WithoutNvmeNothingMoves) {
  const auto settings = settings_of(2, detail::Tier::kDevice, detail::Tier::kHost, "");
  detail::OptimizerFile file(settings);
  torch::Tensor master = torch::ones({4}), grad = torch::zeros({4});
  file.add_group(master, grad);
  file.lend(0);
  file.open_gradient(0, /*clean=*/true);
  file.close_gradient(0);
  file.give_back(0, true);
  EXPECT_FALSE(file.active());
  EXPECT_FALSE(file.holds_gradients());
  EXPECT_EQ(master.numel(), 4);
  EXPECT_EQ(grad.numel(), 4);
}

TEST(ZeroOptimizerFile, MastersAndGradientsOnFileComeBackWithTheirValues) {
  Dir dir;
  const auto settings = settings_of(3, detail::Tier::kDevice, detail::Tier::kFile, dir.path);
  detail::OptimizerFile file(settings);
  torch::Tensor master = torch::arange(4, torch::kFloat), grad = torch::zeros({4});
  file.add_group(master, grad);
  ASSERT_TRUE(file.holds_gradients()) << "stage 3 on the CPU";
  EXPECT_EQ(master.numel(), 0);
  EXPECT_EQ(grad.numel(), 0);

  file.open_gradient(0, /*clean=*/true);  // lent as zeros, nothing read
  EXPECT_EQ(grad.abs().sum().item<float>(), 0.0f);
  grad.add_(torch::full({4}, 1.5));
  file.close_gradient(0);  // written behind
  EXPECT_EQ(grad.numel(), 0);
  file.open_gradient(0, /*clean=*/false);  // a later micro-step adds to what is there
  grad.add_(torch::full({4}, 1.0));
  file.close_gradient(0);
  file.flush();

  file.lend(0);
  file.lend_gradient(0);
  EXPECT_TRUE(torch::equal(master, torch::arange(4, torch::kFloat)));
  EXPECT_TRUE(torch::equal(grad, torch::full({4}, 2.5)));
  master.add_(grad);
  file.give_back_gradient(0);
  file.give_back(0, /*changed=*/true);
  file.flush();
  file.lend(0);
  EXPECT_TRUE(torch::equal(master, torch::arange(4, torch::kFloat) + 2.5));
  file.give_back(0, /*changed=*/false);
}

// Two slots of 64 bytes: a 100-element bf16 gradient goes down in chunks of 32 through them (the
// oldest completed whenever both are busy), copied into fp32 and then added by a second micro-step;
// an fp32 master goes up cast to bf16. No more than the two slots is ever held.
TEST(HostStaging, GoesThroughBoundedSlotsInChunksAndAccumulatesInFp32) {
  detail::HostStaging staging(torch::kCPU, /*slots=*/2, /*max_slot_bytes=*/64);
  const auto gradient = torch::linspace(-3, 3, 100).to(torch::kBFloat16);
  torch::Tensor host = torch::full({100}, 99.0f);  // overwritten by the first download
  staging.download(gradient, host, /*accumulate=*/false);
  staging.download(gradient, host, /*accumulate=*/true);
  staging.drain();
  EXPECT_TRUE(torch::equal(host, gradient.to(torch::kFloat) * 2));
  EXPECT_EQ(staging.pinned_bytes(), 2 * 64);
  EXPECT_EQ(staging.bytes_down(), 2 * 100 * 2);

  const auto master = torch::linspace(0, 1, 70);
  torch::Tensor parameter = torch::zeros({70}, torch::kBFloat16);
  staging.upload(master, parameter);
  staging.uploads_done();
  staging.drain();
  EXPECT_TRUE(torch::equal(parameter, master.to(torch::kBFloat16)));
  EXPECT_EQ(staging.bytes_up(), 70 * 2);
  EXPECT_EQ(staging.pinned_bytes(), 2 * 64) << "the slots never grow past their bound";
}

// The slots are sized to the first copy when that is smaller than the bound, and grow (once idle)
// for a larger one.
TEST(HostStaging, SlotsStartAtTheFirstCopysSizeAndGrowToTheBound) {
  detail::HostStaging staging(torch::kCPU, /*slots=*/3, /*max_slot_bytes=*/1 << 20);
  torch::Tensor small = torch::zeros({16});
  staging.download(torch::ones({16}), small, false);
  EXPECT_EQ(staging.pinned_bytes(), 3 * 64);  // 64 bytes at least
  torch::Tensor large = torch::zeros({1000});
  staging.download(torch::arange(1000, torch::kFloat), large, false);
  staging.drain();
  EXPECT_EQ(staging.pinned_bytes(), 3 * 4000);
  EXPECT_TRUE(torch::equal(small, torch::ones({16})));
  EXPECT_TRUE(torch::equal(large, torch::arange(1000, torch::kFloat)));
}

// The fused host step equals LibTorch's Adam and AdamW to float rounding over 20 steps (weight
// decay on, a 300,007-element master split over 3 threads, the last one's part shorter), and keeps
// LibTorch's state.
TEST(HostAdam, EqualsLibTorchsAdamAndAdamWWithinFloatRounding) {
  const int threads_before = at::get_num_threads();
  at::set_num_threads(3);
  for (bool decoupled : {true, false}) {
    torch::manual_seed(7);
    torch::Tensor mine = torch::randn({300007}), theirs = mine.clone(), initial = mine.clone();
    std::unique_ptr<torch::optim::Optimizer> fused, reference;
    if (decoupled) {
      auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1).betas({0.8, 0.95});
      fused = std::make_unique<detail::HostAdamW>(std::vector<torch::Tensor>{mine}, options);
      reference = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{theirs}, options);
    } else {
      auto options = torch::optim::AdamOptions(1e-2).weight_decay(0.1).betas({0.8, 0.95});
      fused = std::make_unique<detail::HostAdam>(std::vector<torch::Tensor>{mine}, options);
      reference = std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{theirs}, options);
    }
    for (int step = 0; step < 20; ++step) {
      torch::Tensor grad = torch::randn({300007});
      mine.mutable_grad() = grad.clone();
      theirs.mutable_grad() = grad.clone();
      fused->step();
      reference->step();
    }
    const double relative = ((mine - theirs).abs().max() / theirs.abs().max()).item<double>();
    EXPECT_LT(relative, 1e-6) << (decoupled ? "AdamW" : "Adam");
    EXPECT_GT((mine - initial).abs().max().item<double>(), 1e-2) << "the steps moved the parameters";
    auto* state = detail::find_param_state(*fused, mine);
    ASSERT_NE(state, nullptr) << "LibTorch's state is kept";
    ASSERT_NE(detail::step_of(*state), nullptr);
    EXPECT_EQ(*detail::step_of(*state), 20);
  }
  at::set_num_threads(threads_before);
}

}  // namespace zero_offload_parts_test
