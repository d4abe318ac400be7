// cohort's checkpoints and PyTorch's torch.distributed.checkpoint (DCP), both ways, with models/gpt.h's
// GPT and its PyTorch twin under FSDP2: cohort trains at 2 ranks (ZeRO stage 3, AdamW), saves, and
// cohort-ckpt export --format dcp writes what Python loads at 4 ranks; Python trains at 4 ranks, saves
// with dcp.save, and cohort-ckpt import writes what cohort loads at 2. Each time both sides compute the
// same loss on a fixed batch (1e-6), and again after one more AdamW step on it, which only holds when
// the optimizer's moments, step count and hyper-parameters moved too (Python builds its optimizer with
// other ones: the checkpoint's replace them). Needs PyTorch 2.11 for Python
// (tests/python/dcp_interop.py); skipped without it.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "checkpoint/dcp/export.h"
#include "checkpoint/dcp/import.h"
#include "cohort/checkpoint.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "models/gpt.h"
#include "support/command.h"
#include "support/gpt_fixed_batch.h"
#include "support/multiproc.h"
#include "support/python.h"

namespace dcp_interop_test {

namespace fs = std::filesystem;
using cohort::models::GPT;
using cohort::models::GPTConfig;
using cohort::testing::run_command;
using cohort::testing::value_after;

namespace {

constexpr int64_t kLayers = 2, kHeads = 2, kEmbd = 16, kBlock = 8, kVocab = 13, kSteps = 3;
constexpr double kLr = 3e-3;

GPTConfig config() {
  return GPTConfig().n_layer(kLayers).n_head(kHeads).n_embd(kEmbd).block_size(kBlock).vocab_size(kVocab).dropout(0);
}

std::string shape_arguments() {
  return std::to_string(kLayers) + " " + std::to_string(kHeads) + " " + std::to_string(kEmbd) + " " +
         std::to_string(kBlock) + " " + std::to_string(kVocab) + " 1";
}

// The Python with FSDP2 and DCP's state_dict helpers (PyTorch 2.11), or "".
std::string python_with_dcp() {
  std::vector<std::string> candidates = {cohort::testing::python_with_torch()};
  if (const char* home = std::getenv("HOME")) candidates.push_back(std::string(home) + "/.cache/cohort/torch-2.11.0/bin/python");
  for (const std::string& python : candidates) {
    if (::access(python.c_str(), X_OK) != 0) continue;
    if (run_command(python + " -c 'from torch.distributed.fsdp import fully_shard; "
                             "import torch.distributed.checkpoint.state_dict'")
            .code == 0)
      return python;
  }
  return "";
}

std::string script() {
  const char* root = std::getenv("COHORT_SOURCE_DIR");
  const std::string here = __FILE__;
  const std::string source = root != nullptr && *root != '\0' ? root : here.substr(0, here.find_last_of('/')) + "/..";
  return source + "/tests/python/dcp_interop.py";
}

std::string number(double value) {
  std::ostringstream text;
  text.precision(12);
  text << value;
  return text.str();
}

using Engine = cohort::ZeroEngine<cohort::models::GPTImpl>;

torch::Tensor loss_on(Engine& engine, const std::pair<torch::Tensor, torch::Tensor>& batch) {
  return torch::nn::functional::cross_entropy(engine.forward(batch.first).reshape({-1, kVocab}), batch.second.reshape(-1));
}

// The fixed batch's loss, then the loss after one AdamW step on it (every rank the same batch), as
// rank 0 reports them: "loss <x>", "step_loss <y>".
void report_losses(Engine& engine, int rank) {
  const auto batch = cohort::testing::gpt_fixed_batch(kBlock, kVocab);
  double before = 0, after = 0;
  {
    torch::NoGradGuard no_grad;
    before = loss_on(engine, batch).item<double>();
  }
  engine.backward(loss_on(engine, batch));
  engine.step();
  {
    torch::NoGradGuard no_grad;
    after = loss_on(engine, batch).item<double>();
  }
  if (rank != 0) return;
  cohort::testing::report("loss " + number(before));
  cohort::testing::report("step_loss " + number(after));
}

Engine make_engine(GPT& gpt, int size) {
  auto adamw = torch::optim::AdamWOptions(kLr).betas({0.9, 0.99}).eps(1e-8).weight_decay(0.1);
  return cohort::initialize(
      cohort::ZeroConfig().world_size(size).zero_optimization(cohort::ZeroOptimizationConfig().stage(3)), gpt,
      cohort::EngineOptions().optimizer_factory(
          [adamw](std::vector<torch::Tensor> shards) { return std::make_unique<torch::optim::AdamW>(shards, adamw); }));
}


// Rank body: kSteps AdamW steps on seeded batches at `size` ranks, a save by parameter name (as the
// Trainer saves), then the losses.
void train_save_report(int rank, int size) {
  cohort::init();
  torch::manual_seed(1234);
  GPT gpt(config());
  Engine engine = make_engine(gpt, size);
  for (int64_t step = 0; step < kSteps; ++step) {
    torch::manual_seed(500 + step);
    auto tokens = torch::randint(0, kVocab, {2 * size, kBlock + 1}).narrow(0, 2 * rank, 2);
    engine.backward(loss_on(engine, {tokens.narrow(1, 0, kBlock), tokens.narrow(1, 1, kBlock)}));
    engine.step();
  }
  cohort::CheckpointState state;
  state.rng(false).add("engine", engine.parameter_state()).set_step(kSteps);
  cohort::save_checkpoint(std::getenv("DCP_INTEROP_DIR") + std::string("/cohort"), state);
  report_losses(engine, rank);
}

// Rank body: a fresh engine loads the imported checkpoint, then the losses.
void load_report(int rank, int size) {
  cohort::init();
  torch::manual_seed(99);  // other initial weights: the loaded ones must replace them
  GPT gpt(config());
  Engine engine = make_engine(gpt, size);
  cohort::CheckpointState state;
  state.rng(false).add("engine", engine.parameter_state());
  const auto loaded = cohort::load_checkpoint(std::getenv("DCP_INTEROP_DIR") + std::string("/imported"), state,
                                              cohort::LoadOptions().must_exist(true));
  EXPECT_EQ(loaded->step, kSteps);
  report_losses(engine, rank);
}

std::pair<double, double> losses_reported(const std::vector<cohort::testing::RankResult>& results) {
  std::string lines;
  for (const std::string& line : results.at(0).reports) lines += line + "\n";
  const std::pair<double, double> losses = {value_after(lines, "loss "), value_after(lines, "step_loss ")};
  EXPECT_TRUE(losses.first > 0 && losses.second > 0) << "rank 0 reported " << lines << "\n"
                                                     << cohort::testing::describe(results);
  return losses;
}

}  // namespace

TEST(DcpInterop, CohortAtTwoRanksExportsWhatPythonFsdp2LoadsAtFour) {
  const std::string python = cohort::testing::is_rank_process() ? "" : python_with_dcp();
  if (!cohort::testing::is_rank_process() && python.empty()) GTEST_SKIP() << "no Python with FSDP2 and DCP (PyTorch 2.11: scripts/install-torch.sh)";
  cohort::testing::RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  const std::string dir = cohort::testing::shared_temp_dir(options, "DCP_INTEROP_DIR", "dcp_interop_");
  const auto cohort_losses = losses_reported(cohort::testing::run_ranks(2, train_save_report, options));
  cohort::detail::dcp::ExportOptions small_items;
  small_items.max_item_bytes = 200;  // 3 rows of 16 floats an item: PyTorch's loader joins and cuts them
  const auto summary =
      cohort::detail::dcp::export_dcp(dir + "/cohort/step-" + std::to_string(kSteps), dir + "/dcp", small_items);
  EXPECT_EQ(summary.objects, 12);  // param_groups[0]: lr, betas, ..., params
  const auto run = run_command(python + " " + script() + " load " + dir + "/dcp 4 " + std::to_string(kLr) + " " +
                               std::to_string(cohort::testing::free_port()) + " " + shape_arguments());
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_NEAR(value_after(run.out, "loss "), cohort_losses.first, 1e-6) << run.out;
  EXPECT_NEAR(value_after(run.out, "step_loss "), cohort_losses.second, 1e-6) << run.out;
}

TEST(DcpInterop, PythonFsdp2AtFourRanksSavesWhatCohortLoadsAtTwoAfterImport) {
  const std::string python = cohort::testing::is_rank_process() ? "" : python_with_dcp();
  if (!cohort::testing::is_rank_process() && python.empty()) GTEST_SKIP() << "no Python with FSDP2 and DCP (PyTorch 2.11: scripts/install-torch.sh)";
  cohort::testing::RanksOptions options;
  options.deadline = std::chrono::seconds(120);
  const std::string dir = cohort::testing::shared_temp_dir(options, "DCP_INTEROP_DIR", "dcp_interop_");
  if (!cohort::testing::is_rank_process()) {
    const auto run = run_command(python + " " + script() + " save " + dir + "/dcp 4 " + std::to_string(kSteps) + " " +
                                 std::to_string(kLr) + " " + std::to_string(cohort::testing::free_port()) + " " +
                                 shape_arguments());
    ASSERT_EQ(run.code, 0) << run.out;
    const auto summary = cohort::detail::dcp::import_dcp(dir + "/dcp", dir + "/imported", {});
    EXPECT_EQ(summary.step, kSteps);
    EXPECT_EQ(summary.parameters, 2 + 12 * kLayers + 2);  // wte, wpe, each block's 12, ln_f's 2
    const auto cohort_losses = losses_reported(cohort::testing::run_ranks(2, load_report, options));
    EXPECT_NEAR(cohort_losses.first, value_after(run.out, "loss "), 1e-6) << run.out;
    EXPECT_NEAR(cohort_losses.second, value_after(run.out, "step_loss "), 1e-6) << run.out;
  } else {
    cohort::testing::run_ranks(2, load_report, options);
  }
}

}  // namespace dcp_interop_test
