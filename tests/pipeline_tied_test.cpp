// The GPT cut into pipeline stages (models/gpt_pipeline.h), its token embedding on the first stage and
// the head tied to it on the last: 2 stages alone, 2 x 2 with DDP or FSDP (ZeRO stage 3) per stage, and
// 2 stages x tensor parallel 2 (sequence parallel) inside them train as the one GPT of one process on
// the whole batch (AdamW, 6 steps: losses and every rank's parameters, its cut under tensor parallelism,
// within 1e-5). Checkpoints name the GPT's parameters and resume exactly, the tied weight written once;
// ZeRO stage 1 refuses the tie, and so does a step on the gradients of an earlier one (counted twice).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/checkpoint.h"
#include "cohort/mesh.h"
#include "cohort/pipeline.h"
#include "cohort/world.h"
#include "models/gpt_pipeline.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "tp/parameter_cuts.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace pipeline_tied_test {

using ::testing::HasSubstr;
using cohort::models::GPT;
using cohort::models::GPTConfig;
using cohort::testing::error_of;
using cohort::testing::run_ranks;
namespace pp = cohort::pipeline;

namespace {

constexpr int kSteps = 6;
constexpr int kRows = 4;  // per data-parallel replica

// No biases: a key's bias has no effect on attention, so its gradient is float noise that Adam scales
// to whole steps (gpt_tensor_parallel_test).
GPT tiny_gpt() {
  torch::manual_seed(3);
  return GPT(GPTConfig().n_layer(2).n_head(2).n_embd(16).block_size(8).vocab_size(11).bias(false));
}

std::pair<torch::Tensor, torch::Tensor> batch(int step, int rows) {
  auto gen = at::detail::createCPUGenerator(500 + step);
  return {torch::randint(11, {rows, 8}, gen), torch::randint(11, {rows, 8}, gen)};
}

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::AdamW>(std::move(params), torch::optim::AdamWOptions(1e-2));
}

struct Mesh3 {
  std::shared_ptr<cohort::Comm> pipe, data, tp;
};

// Trains the pipelined GPT and the whole one side by side; compares the global batch's losses and the
// parameters (within 1e-5), or under bf16 the losses within 1% of fp32's.
void expect_equivalent(const Mesh3& m, int zero_stage, bool bf16 = false) {
  GPT gpt = tiny_gpt(), reference = tiny_gpt();
  if (m.tp) cohort::tp::parallelize_module(*gpt, m.tp, cohort::models::gpt_tensor_parallel_plan(true));
  auto layers = cohort::models::gpt_pipeline_layers(gpt);
  auto part = pp::partition(layers, m.pipe->size());
  auto options = pp::PipelineOptions().schedule("1f1b").chunks(2).data_comm(m.data)
                     .parameter_names(cohort::models::gpt_pipeline_name)
                     .loss_fn([gpt](const torch::Tensor& out, const torch::Tensor& y) { return gpt->loss_of(out, y); });
  if (zero_stage > 0)
    options.zero(cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(zero_stage)))
        .zero_optimizer(adamw);
  if (bf16) options.zero()->bf16().enabled(true);
  pp::Pipeline pipeline(m.pipe, pp::stages_of_rank(part, m.pipe->size(), m.pipe->rank()), options);
  auto opt = zero_stage > 0 ? nullptr : adamw(pipeline.parameters());
  auto ref_opt = adamw(reference->parameters());
  const int replicas = m.data ? m.data->size() : 1, replica = m.data ? m.data->rank() : 0;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, kRows * replicas);
    auto mine = torch::indexing::Slice(replica * kRows, (replica + 1) * kRows);
    if (opt) opt->zero_grad();
    const double loss = pipeline.step(x.index({mine}), y.index({mine})).item<double>();
    if (opt) opt->step();
    else pipeline.optimizer_step();
    ref_opt->zero_grad();
    auto ref_loss = reference->loss_of(reference->forward(x), y);
    ref_loss.backward();
    ref_opt->step();
    // Every replica's rows are as many: the mean of their losses is the global batch's.
    const double global = m.data ? m.data->allreduce(torch::tensor(loss, torch::kDouble)).item<double>() / replicas : loss;
    const double want = ref_loss.item<double>();
    EXPECT_NEAR(global, want, bf16 ? 0.01 * want : 1e-5) << "step " << step;
  }
  if (bf16) return;
  const auto cuts = m.tp ? cohort::tp::detail::parameter_cuts(*gpt) : std::map<std::string, cohort::tp::detail::ParameterCut>{};
  auto expected = reference->named_parameters();
  const auto mine = pipeline.full_parameters();
  ASSERT_FALSE(mine.empty());
  for (const auto& [name, value] : mine) {
    ASSERT_TRUE(expected.contains(name)) << name;
    const auto cut = cuts.find(name);
    const torch::Tensor want = cut == cuts.end() ? expected[name] : cohort::tp::detail::cut_of(expected[name], cut->second);
    EXPECT_LT((value - want).abs().max().item<double>(), 1e-5) << "stage rank " << m.pipe->rank() << " " << name;
  }
}

cohort::testing::RanksOptions with_timeout(int seconds) {
  cohort::testing::RanksOptions options;
  options.env["COHORT_TIMEOUT"] = std::to_string(seconds);
  options.deadline = std::chrono::seconds(150);
  return options;
}

}  // namespace

TEST(PipelineTiedWeights, GptOnTwoStagesTrainsAsOneProcess) {
  run_ranks(2, [](int, int) {
    auto world = cohort::init();
    expect_equivalent({world.comm_ptr(), nullptr, nullptr}, 0);
    // Checkpoints hold the GPT's names; the tied weight once per holder, which the writers dedupe.
    GPT gpt = tiny_gpt();
    auto layers = cohort::models::gpt_pipeline_layers(gpt);
    pp::Pipeline pipeline(world.comm_ptr(), pp::stages_of_rank(pp::partition(layers, 2), 2, world.rank()),
                          pp::PipelineOptions().parameter_names(cohort::models::gpt_pipeline_name)
                              .loss_fn([gpt](const torch::Tensor& o, const torch::Tensor& y) { return gpt->loss_of(o, y); }));
    // Two steps without zeroing: the tied gradients would be summed twice, so the second is refused.
    auto [x, y] = batch(0, kRows);
    pipeline.step(x, y);
    EXPECT_THAT(error_of([&] { pipeline.step(x, y); }),
                HasSubstr("Pipeline::step: parameter 'transformer.wte.weight', tied across stages, still has a gradient "
                          "from an earlier step"));
  }, with_timeout(120));
}

// 3 steps, a checkpoint, 3 more, against the same 6 steps with a fresh pipeline loading it at 3: the
// same parameters, bitwise; the checkpoint holds the tied weight once, under the GPT's name.
TEST(PipelineTiedWeights, ACheckpointResumesExactlyWithTheTiedWeightOnce) {
  cohort::testing::RanksOptions options = with_timeout(120);
  const std::string dir = cohort::testing::shared_temp_dir(options, "PIPELINE_TIED_CKPT_DIR", "pipeline_tied_");
  run_ranks(2, [dir](int, int) {
    auto world = cohort::init();
    auto train = [&](bool resume) {
      GPT gpt = tiny_gpt();
      auto layers = cohort::models::gpt_pipeline_layers(gpt);
      pp::Pipeline pipeline(world.comm_ptr(), pp::stages_of_rank(pp::partition(layers, 2), 2, world.rank()),
                            pp::PipelineOptions().parameter_names(cohort::models::gpt_pipeline_name).chunks(2)
                                .loss_fn([gpt](const torch::Tensor& o, const torch::Tensor& y) { return gpt->loss_of(o, y); }));
      auto opt = adamw(pipeline.parameters());
      cohort::CheckpointState state;
      state.add("model", pipeline.model_state()).add("optimizer", pipeline.optimizer_state(*opt));
      if (resume) cohort::load_checkpoint(dir, state, cohort::LoadOptions().comm(world.comm_ptr()));
      for (int step = resume ? 3 : 0; step < 6; ++step) {
        auto [x, y] = batch(step, kRows);
        opt->zero_grad();
        pipeline.step(x, y);
        opt->step();
        if (step == 2) cohort::save_checkpoint(dir, state.set_step(3), cohort::SaveOptions().comm(world.comm_ptr()));
      }
      std::map<std::string, torch::Tensor> out;
      for (auto& [name, value] : pipeline.full_parameters()) out[name] = value;
      return out;
    };
    const auto straight = train(false);
    const auto resumed = train(true);
    for (const auto& [name, value] : straight) EXPECT_TRUE(torch::equal(value, resumed.at(name))) << name;
    if (world.rank() == 0) {
      std::ifstream manifest(dir + "/step-3/manifest.json");
      const std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
      EXPECT_EQ(text.find("\"model/transformer.wte.weight\""), text.rfind("\"model/transformer.wte.weight\""));
      EXPECT_NE(text.find("\"model/transformer.wte.weight\""), std::string::npos);
    }
  }, options);
  std::filesystem::remove_all(dir);
}

TEST(PipelineTiedWeights, TwoByTwoUnderDdpAndFsdpPerStage) {
  run_ranks(4, [](int, int) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"pipe", 2}, {"data", 2}});
    const Mesh3 m{mesh.group_ptr("pipe"), mesh.group_ptr("data"), nullptr};
    expect_equivalent(m, 0);
    expect_equivalent(m, 3);
    expect_equivalent(m, 3, /*bf16=*/true);  // bf16 parameters and activations between the stages
    GPT gpt = tiny_gpt();
    auto layers = cohort::models::gpt_pipeline_layers(gpt);
    auto stages = pp::stages_of_rank(pp::partition(layers, 2), 2, m.pipe->rank());
    EXPECT_THAT(error_of([&] {
      pp::Pipeline(m.pipe, stages, pp::PipelineOptions().data_comm(m.data).parameter_names(cohort::models::gpt_pipeline_name)
                                       .loss_fn([gpt](const torch::Tensor& o, const torch::Tensor& y) { return gpt->loss_of(o, y); })
                                       .zero(cohort::ZeroConfig().zero_optimization(cohort::ZeroOptimizationConfig().stage(1)))
                                       .zero_optimizer(adamw));
    }), HasSubstr("Pipeline: parameter 'transformer.wte.weight' is tied across stages (PipelineOptions::parameter_names), "
                  "and ZeRO stage 1 groups each stage's gradients by reduce_bucket_size"));
  }, with_timeout(150));
}

TEST(PipelineTiedWeights, TensorParallelInsideTwoStages) {
  run_ranks(4, [](int, int) {
    auto world = cohort::init();
    cohort::Mesh mesh(world.comm(), {{"pipe", 2}, {"tp", 2}});
    expect_equivalent({mesh.group_ptr("pipe"), nullptr, mesh.group_ptr("tp")}, 0);
  }, with_timeout(150));
}

}  // namespace pipeline_tied_test
