// The offload parts of the ZeRO engine, alone and without ranks: stage 3's parameter shards
// (src/zero/offload/parameter_shards.h) on each tier, max_in_cpu and the step's write-back; the
// optimizer's swap file (src/zero/offload/optimizer_file.h), a no-op without nvme, masters and
// gradients put on file and lent back with their values, a clean gradient lent as zeros.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/open_files.h"
#include "zero/engine_settings.h"
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

}  // namespace zero_offload_parts_test
