// Statefuls that hand out their tensors a part at a time (Stateful::lend_part: the ZeRO engine's
// optimizer state on NVMe): the checkpoint layer holds one part at a time, in order, while a save
// writes and a load fills it; the files are those of the same tensors listed live; a load that fails
// lends no part, so the state stays as it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdlib.h>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cohort/checkpoint.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_parts_test {

namespace fs = std::filesystem;
using cohort::testing::error_of;
using ::testing::HasSubstr;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/checkpoint_parts_test_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string name_of(size_t part, size_t k) { return "p" + std::to_string(part) + ".t" + std::to_string(k); }

// Three parts of two tensors (float and long) kept as its own copies between lends ("on file"), and
// one live tensor. It records the parts lent, and fails the test when two are lent at once.
class Parted : public cohort::Stateful {
 public:
  explicit Parted(float base) : scale(torch::full({2}, base)) {
    for (int p = 0; p < 3; ++p) stored.push_back({torch::full({5}, base + p), torch::arange(3, torch::kLong) + 10 * p});
  }
  std::vector<cohort::StateTensor> state_tensors() override {
    std::vector<cohort::StateTensor> out;
    for (size_t p = 0; p < stored.size(); ++p)
      for (size_t k = 0; k < stored[p].size(); ++k) {
        const torch::Tensor& t = stored[p][k];
        cohort::StateTensor entry{name_of(p, k), torch::empty(t.sizes(), t.options().device(torch::kMeta))};
        entry.part = int64_t(p);
        out.push_back(entry);
      }
    out.push_back({"scale", scale});
    return out;
  }
  std::vector<cohort::StateTensor> lend_part(int64_t part) override {
    EXPECT_EQ(lent_, -1) << "part " << part << " lent while part " << lent_ << " is";
    lent_ = part;
    lent.push_back(part);
    std::vector<cohort::StateTensor> out;
    lent_tensors_.clear();
    for (size_t k = 0; k < stored[size_t(part)].size(); ++k) {
      lent_tensors_.push_back(stored[size_t(part)][k].clone());
      if (wrong_shape) lent_tensors_.back() = torch::zeros({1}, lent_tensors_.back().options());
      out.push_back({name_of(size_t(part), k), lent_tensors_.back()});
    }
    return out;
  }
  void give_back_part(int64_t part, bool changed) override {
    EXPECT_EQ(part, lent_);
    if (changed) stored[size_t(part)] = lent_tensors_;
    changed_parts += changed;
    lent_ = -1;
  }

  std::vector<std::vector<torch::Tensor>> stored;
  torch::Tensor scale;
  std::vector<int64_t> lent;  // in order
  int changed_parts = 0;
  bool wrong_shape = false;

 private:
  int64_t lent_ = -1;
  std::vector<torch::Tensor> lent_tensors_;
};

// The same tensors as `parted`'s, listed live.
class Live : public cohort::Stateful {
 public:
  explicit Live(Parted& parted) : parted_(parted) {}
  std::vector<cohort::StateTensor> state_tensors() override {
    std::vector<cohort::StateTensor> out;
    for (size_t p = 0; p < parted_.stored.size(); ++p)
      for (size_t k = 0; k < parted_.stored[p].size(); ++k) out.push_back({name_of(p, k), parted_.stored[p][k]});
    out.push_back({"scale", parted_.scale});
    return out;
  }

 private:
  Parted& parted_;
};

std::string save(const std::string& dir, cohort::Stateful& stateful) {
  cohort::CheckpointState state;
  state.rng(false).add("state", stateful).set_step(4);
  return cohort::save_checkpoint(dir, state);
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void expect_same_state(const Parted& got, const Parted& want) {
  ASSERT_EQ(got.stored.size(), want.stored.size());
  for (size_t p = 0; p < got.stored.size(); ++p)
    for (size_t k = 0; k < got.stored[p].size(); ++k) EXPECT_TRUE(got.stored[p][k].equal(want.stored[p][k])) << p;
  EXPECT_TRUE(got.scale.equal(want.scale));
}

const char* kShard = "/step-4/shard-00000-of-00001.bin";

}  // namespace

TEST(CheckpointParts, ASaveLendsOnePartAtATimeAndWritesTheBytesOfLiveTensors) {
  TempDir parted_dir, live_dir;
  Parted parted(1);
  save(parted_dir.path, parted);
  EXPECT_EQ(parted.lent, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(parted.changed_parts, 0);
  Live live(parted);
  save(live_dir.path, live);
  EXPECT_EQ(bytes_of(parted_dir.path + kShard), bytes_of(live_dir.path + kShard));
}

// An async save copies every part while it is lent, during the call: what changes after it returns is
// not in the checkpoint, whose bytes are those of a synchronous save of the state at the call.
TEST(CheckpointParts, AnAsyncSaveSnapshotsOnePartAtATimeDuringTheCall) {
  TempDir async_dir, live_dir;
  Parted parted(1), original(1);
  cohort::CheckpointState state;
  state.rng(false).add("state", parted).set_step(4);
  cohort::save_checkpoint(async_dir.path, state, cohort::SaveOptions().async(true));
  EXPECT_EQ(parted.lent, (std::vector<int64_t>{0, 1, 2}));
  parted.stored[1][0].add_(100);
  parted.scale.add_(100);
  cohort::finish_checkpoint_saves();
  EXPECT_FALSE(cohort::checkpoint_save_in_flight());
  Live live(original);
  save(live_dir.path, live);
  EXPECT_EQ(bytes_of(async_dir.path + kShard), bytes_of(live_dir.path + kShard));
}

TEST(CheckpointParts, ALoadFillsOnePartAtATimeAndLoadsWhatLiveTensorsSaved) {
  TempDir dir;
  Parted saved(1);
  Live live(saved);
  save(dir.path, live);
  Parted loaded(7);
  cohort::CheckpointState state;
  state.rng(false).add("state", loaded);
  ASSERT_TRUE(cohort::load_checkpoint(dir.path, state));
  EXPECT_EQ(loaded.lent, (std::vector<int64_t>{0, 1, 2}));  // at commit only: staging lends nothing
  EXPECT_EQ(loaded.changed_parts, 3);
  expect_same_state(loaded, saved);
}

TEST(CheckpointParts, AFailedLoadLendsNoPartAndChangesNothing) {
  TempDir dir;
  Parted saved(1);
  save(dir.path, saved);
  {
    std::fstream file(dir.path + kShard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(32 + 2 * (5 * 4 + 3 * 8) + 4);  // inside the last part: the first two are sound
    file.put('\x7f');
  }
  Parted loaded(7), untouched(7);
  cohort::CheckpointState state;
  state.rng(false).add("state", loaded);
  EXPECT_THAT(error_of([&] { cohort::load_checkpoint(dir.path, state); }), HasSubstr("checksum mismatch"));
  EXPECT_TRUE(loaded.lent.empty());
  expect_same_state(loaded, untouched);
}

TEST(CheckpointParts, ALentTensorOfAnotherShapeIsAnErrorNamingIt) {
  TempDir dir;
  Parted parted(1);
  parted.wrong_shape = true;
  EXPECT_THAT(error_of([&] { save(dir.path, parted); }),
              HasSubstr("tensor 'state/p0.t0': lend_part(0) gave Float [1], state_tensors() listed Float [5]"));
  EXPECT_EQ(parted.lent, (std::vector<int64_t>{0}));  // and given back: the next lend finds none lent
  parted.wrong_shape = false;
  save(dir.path, parted);
}

}  // namespace checkpoint_parts_test
