// cohort-ckpt on a checkpoint saved by 3 ranks (a model, and a flat tensor of 1001 elements split
// unevenly): info says what is inside, verify finds a flipped byte and a truncated shard naming the
// file, consolidate writes one safetensors file whose tensors are the full, reassembled ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <regex>

#include "cohort/checkpoint.h"
#include "cohort/world.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_tool_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using cohort::testing::run_ranks;

namespace {

class Flat : public cohort::Stateful {
 public:
  Flat(int rank, int size) {
    const int64_t chunk = (1001 + size - 1) / size;
    begin_ = std::min<int64_t>(1001, rank * chunk);
    t_ = torch::arange(begin_, std::min<int64_t>(1001, begin_ + chunk), torch::kFloat64);
  }
  std::vector<cohort::StateTensor> state_tensors() override {
    return {{"flat", t_, cohort::StateKind::kSharded, 1001, begin_}};
  }
  torch::Tensor t_;
  int64_t begin_ = 0;
};

using cohort::testing::ToolRun;

ToolRun tool(const std::string& args) { return cohort::testing::run_tool("tools/cohort_ckpt/cohort-ckpt", args); }

// The bytes of tensor `name` in a safetensors file, and its header entry.
std::string safetensors_bytes(const std::string& path, const std::string& name, std::string* entry) {
  std::ifstream in(path, std::ios::binary);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(static_cast<unsigned char>(in.get())) << (8 * i);
  std::string header(length, ' ');
  in.read(header.data(), static_cast<std::streamsize>(length));
  std::smatch match;
  const std::regex pattern("\"" + name + "\":(\\{\"data_offsets\":\\[(\\d+),(\\d+)\\][^}]*\\})");
  if (!std::regex_search(header, match, pattern)) return "";
  *entry = match[1];
  const int64_t begin = std::stoll(match[2]), end = std::stoll(match[3]);
  std::string bytes(end - begin, '\0');
  in.seekg(8 + length + begin);
  in.read(bytes.data(), end - begin);
  return bytes;
}

}  // namespace

TEST(CheckpointTool, InfoVerifyConsolidate) {
  cohort::testing::RanksOptions options;
  const std::string dir = cohort::testing::shared_temp_dir(options, "CKPT_TEST_DIR", "checkpoint_tool_");
  run_ranks(3, [&](int rank, int size) {
    cohort::init();
    torch::manual_seed(1);
    cohort::testing::Mlp model;
    Flat flat(rank, size);
    cohort::CheckpointState state;
    state.add("model", *model).add("engine", flat).set_step(7).set("run", "tool-test");
    cohort::save_checkpoint(dir, state);
  }, options);
  if (cohort::testing::is_rank_process()) return;
  const std::string step = dir + "/step-7";

  const ToolRun info = tool("info --tensors " + dir);
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_THAT(info.out, HasSubstr("checkpoint " + step + "\n  step 7, saved by 3 rank(s), ZeRO stage 0"));
  EXPECT_THAT(info.out, HasSubstr("    model: 6 tensors, "));
  EXPECT_THAT(info.out, HasSubstr("  user run = tool-test"));
  EXPECT_THAT(info.out, HasSubstr("    engine/flat  sharded float64 [1001]  3 piece(s)"));

  const std::string out = dir + "/full.safetensors";
  const ToolRun consolidated = tool("consolidate " + dir + " -o " + out);
  EXPECT_EQ(consolidated.code, 0) << consolidated.out;
  std::string entry;
  const std::string flat = safetensors_bytes(out, "engine/flat", &entry);
  EXPECT_THAT(entry, HasSubstr("\"dtype\":\"F64\",\"shape\":[1001]"));
  const torch::Tensor expected = torch::arange(1001, torch::kFloat64);
  ASSERT_EQ(flat.size(), 1001u * 8);
  EXPECT_EQ(std::memcmp(flat.data(), expected.data_ptr(), flat.size()), 0);
  torch::manual_seed(1);
  cohort::testing::Mlp model;
  const std::string weight = safetensors_bytes(out, "model/fc1.weight", &entry);
  EXPECT_THAT(entry, HasSubstr("\"dtype\":\"F32\",\"shape\":[32,20]"));
  ASSERT_EQ(weight.size(), 32u * 20 * 4);
  EXPECT_EQ(std::memcmp(weight.data(), model->fc1->weight.data_ptr(), weight.size()), 0);

  EXPECT_EQ(tool("verify " + dir).code, 0);
  const std::string shard = step + "/shard-00002-of-00003.bin";
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(40);
    file.put('\x55');
  }
  const ToolRun flipped = tool("verify " + step);
  EXPECT_EQ(flipped.code, 1);
  EXPECT_THAT(flipped.out, HasSubstr("cohort-ckpt: checksum mismatch in " + shard + " for tensor '"));
  EXPECT_THAT(flipped.out, HasSubstr(step + ": BAD (1 problem(s))"));
  const ToolRun refused = tool("consolidate " + dir + " -o " + out + ".2");
  EXPECT_EQ(refused.code, 1);
  EXPECT_FALSE(fs::exists(out + ".2")) << "a failed consolidation leaves no file";
  fs::resize_file(shard, fs::file_size(shard) - 8);
  const ToolRun truncated = tool("verify " + dir);
  EXPECT_EQ(truncated.code, 1);
  EXPECT_THAT(truncated.out, HasSubstr("shard file " + shard + " is truncated: "));
  EXPECT_EQ(tool("verify " + dir + "/nowhere").out,
            "cohort-ckpt: error: checkpoint path " + dir + "/nowhere does not exist\n");
  fs::remove_all(dir);
}

// Issue 17 item 7: consolidate refuses to write into the checkpoint it reads (it used to replace a
// shard with the safetensors file and exit 0), a directory whose 'latest' is gone is read from its
// newest step as training resumes from it, and an unknown subcommand is named.
TEST(CheckpointTool, RefusesItsOwnInputReadsWithoutLatestNamesUnknownSubcommands) {
  char name[] = "/tmp/checkpoint_tool_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  torch::manual_seed(1);
  cohort::testing::Mlp model;
  for (int64_t step : {10, 30}) {
    cohort::CheckpointState state;
    state.add("model", *model).set_step(step);
    cohort::save_checkpoint(dir, state);  // a world of one: no init() needed
  }
  const std::string shard = dir + "/step-30/shard-00000-of-00001.bin";
  const auto shard_bytes = fs::file_size(shard);
  const ToolRun self = tool("consolidate " + dir + " -o " + shard);
  EXPECT_EQ(self.code, 2) << self.out;
  EXPECT_EQ(self.out, "cohort-ckpt: error: the output " + shard + " is inside the checkpoint it reads (" + dir +
                          "/step-30): writing it there would replace or add to the checkpoint's own files; "
                          "write it elsewhere\n");
  EXPECT_EQ(fs::file_size(shard), shard_bytes);
  const ToolRun latest = tool("consolidate " + dir + " -o " + dir + "/latest");
  EXPECT_EQ(latest.code, 2) << latest.out;
  EXPECT_EQ(latest.out, "cohort-ckpt: error: the output " + dir + "/latest is the 'latest' pointer of " + dir +
                            ": write it elsewhere\n");
  EXPECT_EQ(tool("verify " + dir).code, 0) << "the checkpoint is intact";

  fs::remove(dir + "/latest");
  const ToolRun info = tool("info " + dir);
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_THAT(info.out, HasSubstr("checkpoint " + dir + "/step-30\n  step 30, saved by 1 rank(s)"));
  EXPECT_EQ(tool("verify " + dir).out, dir + "/step-30: OK (every file and checksum matches the manifest)\n");
  fs::create_directory(dir + "/empty");
  const ToolRun empty = tool("info " + dir + "/empty");
  EXPECT_EQ(empty.code, 2);
  EXPECT_EQ(empty.out, "cohort-ckpt: error: " + dir +
                           "/empty holds no checkpoint: no manifest.json, no 'latest' pointer and no step-<n> "
                           "directory\n");

  const ToolRun unknown = tool("inspect " + dir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(unknown.out, "cohort-ckpt: error: unknown subcommand 'inspect': expected info, verify, consolidate, export or import\n");
  fs::remove_all(dir);
}

}  // namespace checkpoint_tool_test
