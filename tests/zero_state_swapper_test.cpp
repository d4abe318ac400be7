// The swapper of ZeRO-Infinity's states (src/zero/offload/state_swapper.h): tensors put on file come
// back with their values and their identity, a change is kept only when given back as changed, reads
// ahead and writes behind hold at most buffer_count buffers, and a file cut under the job is one I/O
// error naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cohort/error.h"
#include "support/open_files.h"
#include "zero/offload/state_swapper.h"

namespace zero_state_swapper_test {

namespace detail = cohort::detail;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

struct Dir {
  Dir() {
    std::string pattern = (fs::temp_directory_path() / "cohort-swapper-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~Dir() { fs::remove_all(path); }
  std::string path;
};

detail::SwapperOptions options_in(const std::string& dir, int buffer_count) {
  detail::SwapperOptions options;
  options.directory = dir;
  options.key = "offload_optimizer.nvme_path";
  options.what = "optimizer";
  options.buffer_count = buffer_count;
  options.aio.block_size = 4096;
  options.aio.queue_depth = 2;
  return options;
}

TEST(StateSwapper, TensorsComeBackWithTheirValuesAndIdentity) {
  Dir dir;
  detail::StateSwapper swapper(options_in(dir.path, 2));
  torch::manual_seed(0);
  torch::Tensor master = torch::randn({1000});
  torch::Tensor moment = torch::randn({3, 5}).to(torch::kDouble);
  const torch::Tensor master_values = master.clone(), moment_values = moment.clone();
  auto* const identity = master.unsafeGetTensorImpl();
  const auto slot = swapper.add_slot({master, moment});
  EXPECT_EQ(master.numel(), 0) << "on file, the tensor holds nothing";
  EXPECT_EQ(swapper.file_bytes(), 4096 + 4096);  // each tensor at an aligned offset
  swapper.lend(slot);
  EXPECT_EQ(master.unsafeGetTensorImpl(), identity);
  EXPECT_TRUE(master.equal(master_values));
  EXPECT_TRUE(moment.equal(moment_values));
  EXPECT_EQ(moment.sizes(), (std::vector<int64_t>{3, 5}));
  master.add_(1);
  swapper.give_back(slot, /*changed=*/true);
  EXPECT_EQ(master.numel(), 0);
  swapper.lend(slot);  // the write may still be in flight: the values are the buffer's
  EXPECT_TRUE(master.equal(master_values + 1));
  master.add_(1);
  swapper.give_back(slot, /*changed=*/false);  // not written
  swapper.flush();
  swapper.lend(slot);
  EXPECT_TRUE(master.equal(master_values + 1));
}

TEST(StateSwapper, ReadsAheadAndWritesBehindHoldAtMostBufferCountBuffers) {
  Dir dir;
  detail::StateSwapper swapper(options_in(dir.path, 2));
  std::vector<torch::Tensor> tensors;
  std::vector<detail::StateSwapper::Slot> slots;
  for (int i = 0; i < 6; ++i) {
    tensors.push_back(torch::full({1024}, float(i)));  // 4096 bytes each
    slots.push_back(swapper.add_slot({tensors.back()}));
    EXPECT_LE(swapper.host_bytes(), 2 * 4096);
  }
  for (int i = 0; i < 6; ++i) {
    for (int ahead = i + 1; ahead < 6; ++ahead) swapper.prefetch(slots[size_t(ahead)]);
    swapper.lend(slots[size_t(i)]);
    EXPECT_LE(swapper.host_bytes(), 3 * 4096) << "one lent, two ahead or behind";
    EXPECT_TRUE(tensors[size_t(i)].eq(float(i)).all().item<bool>()) << i;
    tensors[size_t(i)].mul_(2);
    swapper.give_back(slots[size_t(i)], true);
  }
  swapper.flush();
  for (int i = 0; i < 6; ++i) {
    swapper.lend(slots[size_t(i)]);
    EXPECT_TRUE(tensors[size_t(i)].eq(float(2 * i)).all().item<bool>()) << i;
    swapper.give_back(slots[size_t(i)], false);
  }
  EXPECT_EQ(swapper.host_bytes(), 0);
}

TEST(StateSwapper, AFileCutUnderTheJobIsAnIoErrorNamingIt) {
  Dir dir;
  detail::StateSwapper swapper(options_in(dir.path, 1));
  torch::Tensor t = torch::ones({4096});
  const auto slot = swapper.add_slot({t});
  swapper.flush();
  const std::string path = swapper.file().path();
  ASSERT_EQ(::ftruncate(swapper.file().fd(), 0), 0);  // its name is unlinked: cut through the descriptor
  try {
    swapper.lend(slot);
    ADD_FAILURE() << "no error";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.kind(), cohort::ErrorKind::kIO) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("of the swap file " + path + " (rank 0) failed"));
  }
  EXPECT_EQ(t.numel(), 0) << "nothing lent from a failed read";
}

TEST(StateSwapper, TheFileGoesWithTheSwapper) {
  Dir dir;
  {
    detail::StateSwapper swapper(options_in(dir.path, 1));
    torch::Tensor t = torch::ones({10});
    swapper.add_slot({t});
    EXPECT_EQ(cohort::testing::open_files_under(dir.path), 1u);
    EXPECT_TRUE(fs::is_empty(dir.path));  // unlinked at once (zero/offload/swap_file.h)
  }
  EXPECT_EQ(cohort::testing::open_files_under(dir.path), 0u);
}

}  // namespace
}  // namespace zero_state_swapper_test
