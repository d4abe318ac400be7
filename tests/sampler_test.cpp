// DistributedSampler tests: index-for-index equality with PyTorch's own sampler (tests/python/
// sampler_reference.py, run with Debian's /usr/bin/python3 + python3-torch over a grid of sizes,
// replicas, ranks, seeds, epochs, shuffle and drop_last), the exact evaluation split, option
// validation, world resolution (a world of one without cohort::init(), with a warning under a launcher)
// and batching. A missing Python or torch fails.
#include "cohort/sampler.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "support/errors.h"
#include "support/python.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace sampler_test {

namespace {

using cohort::DistributedSampler;
using cohort::SamplerOptions;


std::string reference_script() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  if (root != nullptr && *root != '\0') {
    return std::string(root) + "/tests/python/sampler_reference.py";
  }
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of('/')) + "/python/sampler_reference.py";
}

// Runs `command`, returns its stdout; `status` gets the exit status from pclose.
std::string run_command(const std::string& command, int* status) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return "";
  }
  std::string output;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  *status = pclose(pipe);
  return output;
}

using cohort::testing::error_of;

TEST(DistributedSampler, MatchesPyTorchIndexForIndex) {
  const std::string python = cohort::testing::python_with_torch();
  ASSERT_EQ(access(python.c_str(), X_OK), 0)
      << python << " not found: this test compares against PyTorch's DistributedSampler and needs "
      << "Debian's python3 with python3-torch (apt-get install python3-torch)";
  const std::string script = reference_script();
  ASSERT_EQ(access(script.c_str(), R_OK), 0) << "reference script not found: " << script;
  int status = 0;
  const std::string output = run_command(python + " " + script + " 2>&1", &status);
  ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << python << " " << script << " failed (exit status "
      << (status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1)
      << "); is python3-torch installed? Output:\n"
      << output.substr(0, 2000);

  std::istringstream lines(output);
  std::string line;
  int cases = 0;
  int declared_cases = -1;
  int mismatches = 0;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag == "end") {
      in >> declared_cases;
      continue;
    }
    if (tag != "case") continue;
    int64_t n = 0, seed = 0, epoch = 0, count = 0;
    int replicas = 0, rank = 0, shuffle = 0, drop_last = 0;
    std::string colon;
    in >> n >> replicas >> rank >> shuffle >> seed >> drop_last >> epoch >> count >> colon;
    ASSERT_EQ(colon, ":") << "malformed line: " << line.substr(0, 200);
    std::vector<int64_t> expected;
    for (int64_t value = 0; in >> value;) expected.push_back(value);
    ASSERT_EQ(static_cast<int64_t>(expected.size()), count) << line.substr(0, 200);

    DistributedSampler sampler(n, SamplerOptions()
                                      .shuffle(shuffle != 0)
                                      .seed(seed)
                                      .drop_last(drop_last != 0)
                                      .num_replicas(replicas)
                                      .rank(rank));
    sampler.set_epoch(epoch);
    const std::vector<int64_t> actual = sampler.indices();
    ++cases;
    if (actual != expected || sampler.size() != count) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << "differs from PyTorch: " << line.substr(0, 300) << "\n size() "
                      << sampler.size() << ", first cohort index "
                      << (actual.empty() ? -1 : actual[0]);
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases << " cases";
  ASSERT_EQ(cases, declared_cases) << "reference output incomplete";
  EXPECT_GT(cases, 3000);
}

TEST(DistributedSampler, PaddingRepeatsFromTheFront) {
  // 10 over 4 ranks without shuffle: total 12, padded with 0 and 1; rank 2 gets 2, 6, 0.
  DistributedSampler sampler(10, SamplerOptions().shuffle(false).num_replicas(4).rank(2));
  EXPECT_EQ(sampler.size(), 3);
  EXPECT_EQ(sampler.total_size(), 12);
  EXPECT_EQ(sampler.indices(), (std::vector<int64_t>{2, 6, 0}));
  // One sample over 4 ranks: every rank gets it (PyTorch repeats the list).
  DistributedSampler tiny(1, SamplerOptions().num_replicas(4).rank(3));
  EXPECT_EQ(tiny.indices(), (std::vector<int64_t>{0}));
  // drop_last: floor(10 / 4) = 2 per rank, the tail (8, 9) dropped.
  DistributedSampler dropped(
      10, SamplerOptions().shuffle(false).drop_last(true).num_replicas(4).rank(3));
  EXPECT_EQ(dropped.indices(), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(dropped.total_size(), 8);
}

TEST(DistributedSampler, ExactSplitCoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 5, 7, 10, 11, 100, 1001}) {
    for (int replicas : {1, 2, 3, 4, 7, 16}) {
      for (bool shuffle : {false, true}) {
        std::vector<int64_t> seen;
        int64_t smallest = n, largest = 0;
        for (int rank = 0; rank < replicas; ++rank) {
          DistributedSampler sampler(n, SamplerOptions()
                                            .exact_split(true)
                                            .shuffle(shuffle)
                                            .seed(42)
                                            .num_replicas(replicas)
                                            .rank(rank));
          sampler.set_epoch(2);
          const auto mine = sampler.indices();
          EXPECT_EQ(static_cast<int64_t>(mine.size()), sampler.size());
          EXPECT_EQ(sampler.size(), n / replicas + (rank < n % replicas ? 1 : 0));
          EXPECT_EQ(sampler.total_size(), n);
          smallest = std::min<int64_t>(smallest, mine.size());
          largest = std::max<int64_t>(largest, mine.size());
          seen.insert(seen.end(), mine.begin(), mine.end());
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int64_t> all(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
        EXPECT_EQ(seen, all) << "n " << n << " replicas " << replicas << " shuffle " << shuffle;
        EXPECT_LE(largest - smallest, 1);
      }
    }
  }
}

TEST(DistributedSampler, ExactSplitEqualsTrainingSplitWhenEven) {
  // When N divides evenly there is nothing to pad, so both modes give the same shards.
  for (int rank = 0; rank < 4; ++rank) {
    auto options = SamplerOptions().seed(7).num_replicas(4).rank(rank);
    DistributedSampler train(100, options);
    DistributedSampler eval(100, options.exact_split(true));
    EXPECT_EQ(train.indices(), eval.indices());
  }
}

TEST(DistributedSampler, ValidatesOptions) {
  EXPECT_NE(error_of([] {
              DistributedSampler(10, SamplerOptions().num_replicas(4).rank(4));
            }).find("rank 4 is out of range for num_replicas 4"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              DistributedSampler(10, SamplerOptions().num_replicas(0).rank(0));
            }).find("num_replicas must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              DistributedSampler(10, SamplerOptions().num_replicas(2).rank(-3));
            }).find("rank must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              DistributedSampler(-5, SamplerOptions().num_replicas(1).rank(0));
            }).find("dataset_size must be >= 0, got -5"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              DistributedSampler(
                  10, SamplerOptions().num_replicas(2).rank(0).exact_split(true).drop_last(true));
            }).find("exact_split"),
            std::string::npos);
  DistributedSampler ok(10, SamplerOptions().num_replicas(2).rank(0));
  EXPECT_NE(error_of([&] { ok.batches(0); }).find("batch_size must be >= 1, got 0"),
            std::string::npos);
}

TEST(DistributedSampler, WithoutInitIsAWorldOfOneAndSaysWhyUnderALauncher) {
  // One rule for "which Comm?" (resolve_comm): the world of cohort::init(), else a world of one; a
  // launcher's RANK/WORLD_SIZE without init() gets a warning, never a silent partial shard.
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  DistributedSampler lone(10);
  EXPECT_EQ(lone.rank(), 0);
  EXPECT_EQ(lone.num_replicas(), 1);
  EXPECT_EQ(lone.size(), 10);

  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);
  testing::internal::CaptureStderr();
  DistributedSampler under_launcher(10);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(under_launcher.rank(), 0);
  EXPECT_EQ(under_launcher.num_replicas(), 1);
  EXPECT_NE(warning.find("DistributedSampler: cohort::init() has not been called, but cohortrun/torchrun (rank 2 "
                         "of 3) says this process is one rank of many; it runs as a world of one"),
            std::string::npos)
      << warning;
  // Explicit options win.
  DistributedSampler explicit_world(10, SamplerOptions().num_replicas(5).rank(4));
  EXPECT_EQ(explicit_world.rank(), 4);
  EXPECT_EQ(explicit_world.num_replicas(), 5);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

TEST(DistributedSampler, SetEpochReshuffles) {
  DistributedSampler sampler(100, SamplerOptions().seed(3).num_replicas(2).rank(1));
  const auto epoch0 = sampler.indices();
  EXPECT_EQ(sampler.indices(), epoch0) << "indices() must be deterministic within an epoch";
  sampler.set_epoch(1);
  EXPECT_EQ(sampler.epoch(), 1);
  const auto epoch1 = sampler.indices();
  EXPECT_NE(epoch0, epoch1);
  auto sorted0 = epoch0, sorted1 = epoch1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  EXPECT_NE(sorted0, sorted1) << "a new epoch should also change which samples this rank gets";
  // Without shuffle, the epoch changes nothing.
  DistributedSampler fixed(100, SamplerOptions().shuffle(false).num_replicas(2).rank(1));
  const auto before = fixed.indices();
  fixed.set_epoch(9);
  EXPECT_EQ(fixed.indices(), before);
}

TEST(DistributedSampler, BatchesAreConsecutiveChunks) {
  DistributedSampler sampler(23, SamplerOptions().seed(1).num_replicas(2).rank(0));
  const auto all = sampler.indices();  // 12 indices
  const auto batches = sampler.batches(5);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(sampler.num_batches(5), 3);
  EXPECT_EQ(batches[2].size(), 2u);
  std::vector<int64_t> joined;
  for (const auto& batch : batches) joined.insert(joined.end(), batch.begin(), batch.end());
  EXPECT_EQ(joined, all);

  const auto tensors = sampler.batch_tensors(5);
  ASSERT_EQ(tensors.size(), 3u);
  for (size_t b = 0; b < tensors.size(); ++b) {
    EXPECT_EQ(tensors[b].scalar_type(), torch::kLong);
    EXPECT_EQ(tensors[b].dim(), 1);
    std::vector<int64_t> values(tensors[b].data_ptr<int64_t>(),
                                tensors[b].data_ptr<int64_t>() + tensors[b].numel());
    EXPECT_EQ(values, batches[b]);
  }

  DistributedSampler dropping(
      23, SamplerOptions().seed(1).num_replicas(2).rank(0).drop_last_batch(true));
  EXPECT_EQ(dropping.batches(5).size(), 2u);
  EXPECT_EQ(dropping.batch_tensors(5).size(), 2u);
  EXPECT_EQ(dropping.batches(12).size(), 1u);
  EXPECT_EQ(dropping.batches(13).size(), 0u);

  DistributedSampler empty(0, SamplerOptions().num_replicas(3).rank(1));
  EXPECT_TRUE(empty.indices().empty());
  EXPECT_TRUE(empty.batches(4).empty());
  EXPECT_TRUE(empty.batch_tensors(4).empty());
}

}  // namespace

}  // namespace sampler_test
