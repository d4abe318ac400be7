// cohort-ckpt export --format dcp and import, without Python: a ZeRO engine's checkpoint by parameter
// name goes to PyTorch's DCP format and back (cut into many small items, so tensors span several
// chunks) and a fresh engine loads the same weights, moments and step count; what cannot map is refused
// with one line naming it. tests/dcp_interop_test.cpp checks the same files against PyTorch itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/dcp/dcp_files.h"
#include "checkpoint/dcp/export.h"
#include "checkpoint/dcp/import.h"
#include "checkpoint/dcp/metadata.h"
#include "cohort/checkpoint.h"
#include "cohort/zero.h"
#include "support/errors.h"

namespace dcp_export_test {

namespace fs = std::filesystem;
using cohort::testing::error_of;
using ::testing::HasSubstr;
namespace dcp = cohort::detail::dcp;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/dcp_export_test_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
};

struct Net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor scale;  // a buffer: whole on every rank, no optimizer state
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(5, 7));
    fc2 = register_module("fc2", torch::nn::Linear(7, 3));
    scale = register_buffer("scale", torch::rand({3}));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::tanh(fc1(x))) * scale; }
};

using Engine = cohort::ZeroEngine<Net>;

Engine make_engine(int seed, bool sgd = false) {
  torch::manual_seed(seed);
  auto adam = torch::optim::AdamWOptions(0.01).betas({0.8, 0.95}).eps(1e-7).weight_decay(0.05);
  return cohort::initialize(
      cohort::ZeroConfig().world_size(1).zero_optimization(cohort::ZeroOptimizationConfig().stage(3)),
      std::make_shared<Net>(),
      cohort::EngineOptions().optimizer_factory([adam, sgd](std::vector<torch::Tensor> shards) {
        if (sgd)
          return std::unique_ptr<torch::optim::Optimizer>(
              std::make_unique<torch::optim::SGD>(shards, torch::optim::SGDOptions(0.1).momentum(0.9)));
        return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<torch::optim::AdamW>(shards, adam));
      }));
}

void train(Engine& engine, int steps) {
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(100 + step);
    engine.backward(engine.forward(torch::randn({4, 5})).pow(2).mean());
    engine.step();
  }
}

std::string save(Engine& engine, const std::string& dir, int64_t step) {
  cohort::CheckpointState state;
  state.rng(false).add("engine", engine.parameter_state()).set_step(step);
  return cohort::save_checkpoint(dir, state);
}

void expect_same_parameters(Engine& a, Engine& b) {
  const auto want = a.full_parameters(), got = b.full_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].first, got[i].first);
    EXPECT_TRUE(torch::equal(want[i].second, got[i].second)) << want[i].first;
  }
}

}  // namespace

TEST(DcpExport, AnEngineCheckpointGoesToDcpAndBackInManySmallItems) {
  TempDir dir;
  Engine engine = make_engine(1);
  train(engine, 3);
  const std::string step_dir = save(engine, dir.path + "/ckpt", 3);
  dcp::ExportOptions options;
  options.max_item_bytes = 40;  // fc1.weight (7 x 5 floats) in 4 items of 2 rows, one of 1
  const auto summary = dcp::export_dcp(step_dir, dir.path + "/dcp", options);
  EXPECT_EQ(summary.tensors, 4 * 4 + 1);  // each parameter: its weights, two moments and a step; the buffer
  EXPECT_EQ(summary.objects, 12);
  const dcp::DcpMetadata md = dcp::read_dcp_metadata(dir.path + "/dcp");
  const auto fc1 = std::find_if(md.entries.begin(), md.entries.end(), [](const auto& e) { return e.fqn == "model.fc1.weight"; });
  ASSERT_NE(fc1, md.entries.end());
  EXPECT_EQ(fc1->chunks.size(), 4u);
  dcp::DcpFiles files(dir.path + "/dcp");
  const auto lr = std::find_if(md.entries.begin(), md.entries.end(),
                               [](const auto& e) { return e.fqn == "optimizer.param_groups.0.lr"; });
  ASSERT_NE(lr, md.entries.end());
  EXPECT_DOUBLE_EQ(files.object(*lr).real, 0.01);

  const auto imported = dcp::import_dcp(dir.path + "/dcp", dir.path + "/imported", {});
  EXPECT_EQ(imported.step, 3);
  EXPECT_EQ(imported.parameters, 4);
  EXPECT_EQ(imported.buffers, 1);  // not in the optimizer's params: written as the engine's buffer
  Engine fresh = make_engine(2);
  cohort::CheckpointState state;
  state.rng(false).add("engine", fresh.parameter_state());
  ASSERT_TRUE(cohort::load_checkpoint(dir.path + "/imported", state));
  expect_same_parameters(engine, fresh);
  EXPECT_TRUE(torch::equal(engine.module()->scale, fresh.module()->scale));
  // The moments and the step count came too: the next step is the same step.
  train(engine, 1);
  train(fresh, 1);
  expect_same_parameters(engine, fresh);
}

TEST(DcpExport, WhatCannotMapIsRefusedNamingIt) {
  TempDir dir;
  Engine engine = make_engine(1);
  train(engine, 1);
  const std::string step_dir = save(engine, dir.path + "/ckpt", 1);
  dcp::ExportOptions prefixed;
  prefixed.prefix = "gpt.";
  EXPECT_EQ(error_of([&] { dcp::export_dcp(step_dir, dir.path + "/a", prefixed); }),
            "'fc1.bias' (of 'engine/fc1.bias.exp_avg') does not begin with --prefix 'gpt.': its name in the model "
            "cannot be made");
  EXPECT_FALSE(fs::exists(dir.path + "/a"));
  fs::create_directories(dir.path + "/full");
  std::ofstream(dir.path + "/full/keep") << "x";
  EXPECT_EQ(error_of([&] { dcp::export_dcp(step_dir, dir.path + "/full", {}); }),
            "the output " + dir.path + "/full exists and is not an empty directory: name a new one");
  EXPECT_TRUE(fs::exists(dir.path + "/full/keep"));

  // A LibTorch optimizer beside a plain module: its state is by number, not by name.
  torch::manual_seed(1);
  auto net = std::make_shared<Net>();
  torch::optim::Adam adam(net->parameters());
  net->forward(torch::randn({2, 5})).sum().backward();
  adam.step();
  cohort::CheckpointState ddp;
  ddp.rng(false).add("model", *net).add("optimizer", adam).set_step(1);
  const std::string ddp_dir = cohort::save_checkpoint(dir.path + "/ddp", ddp);
  EXPECT_THAT(error_of([&] { dcp::export_dcp(ddp_dir, dir.path + "/b", {}); }),
              HasSubstr("' is the state of an optimizer whose parameters are numbered, not named (a LibTorch optimizer "
                        "beside DDP): export the model with --model-only"));
  dcp::ExportOptions model_only;
  model_only.model_only = true;
  EXPECT_EQ(dcp::export_dcp(ddp_dir, dir.path + "/c", model_only).tensors, 5);  // 4 parameters, the buffer
}

TEST(DcpExport, AnEngineSavedAsFlatGroupsOrSteppedBySgdIsRefused) {
  TempDir dir;
  Engine engine = make_engine(1);
  train(engine, 1);
  cohort::CheckpointState flat;
  flat.rng(false).add("engine", engine).set_step(1);  // the engine's own Stateful: flat groups
  const std::string flat_dir = cohort::save_checkpoint(dir.path + "/flat", flat);
  EXPECT_EQ(error_of([&] { dcp::export_dcp(flat_dir, dir.path + "/a", {}); }),
            "'engine/group0.exp_avg' is a flat group of a ZeRO engine's parameters, not one parameter's (the engine "
            "was added to the CheckpointState itself, or its optimizer state was on NVMe): save it by parameter name, "
            "state.add(\"engine\", engine.parameter_state()), as the Trainer does, to export it");
  Engine sgd = make_engine(1, /*sgd=*/true);
  train(sgd, 1);
  const std::string sgd_dir = save(sgd, dir.path + "/sgd", 1);
  EXPECT_EQ(error_of([&] { dcp::export_dcp(sgd_dir, dir.path + "/b", {}); }),
            "the checkpoint's 'engine' has no 'zero.adam.lr': its optimizer is not LibTorch's Adam or AdamW "
            "(PyTorch's state of another one is not written), or it was saved before cohort recorded Adam's "
            "hyper-parameters: export it with --model-only");
  dcp::ExportOptions model_only;
  model_only.model_only = true;
  EXPECT_EQ(dcp::export_dcp(sgd_dir, dir.path + "/c", model_only).tensors, 5);
  EXPECT_FALSE(fs::exists(dir.path + "/a"));
  EXPECT_FALSE(fs::exists(dir.path + "/b"));
}

TEST(DcpExport, AnImportThatFailsLeavesNoOutput) {
  TempDir dir;
  Engine engine = make_engine(1);
  train(engine, 1);
  dcp::export_dcp(save(engine, dir.path + "/ckpt", 1), dir.path + "/dcp", {});
  // A byte of a master's item changed: found when the save lends that parameter, after it made the directory.
  const dcp::DcpMetadata md = dcp::read_dcp_metadata(dir.path + "/dcp");
  const auto weight = std::find_if(md.entries.begin(), md.entries.end(), [](const auto& e) { return e.fqn == "model.fc2.weight"; });
  ASSERT_NE(weight, md.entries.end());
  const dcp::DcpChunk& item = weight->chunks.at(0);
  std::fstream file(dir.path + "/dcp/" + item.file, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes(static_cast<size_t>(item.length), '\0');
  file.seekg(item.offset);
  file.read(bytes.data(), item.length);
  const std::string record = "archive/data/0";  // its local header's name; the tensor's bytes follow
  const int64_t at = item.offset + int64_t(bytes.find(record) + record.size()) + 8;
  file.seekp(at);
  file.put(static_cast<char>(bytes[size_t(at - item.offset)] ^ 0x5a));
  file.close();
  EXPECT_THAT(error_of([&] { dcp::import_dcp(dir.path + "/dcp", dir.path + "/imported", {}); }),
              HasSubstr("fails its CRC32 check"));
  EXPECT_FALSE(fs::exists(dir.path + "/imported"));
}

}  // namespace dcp_export_test
