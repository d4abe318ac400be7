// The per-parameter step counts saved as tensors (the pipeline's "<param>.step", int64, beside the
// parameter's state): hostile pass 10, M2, -1, 0, past the Trainer's step, 2^62 and a deleted step each
// verified OK and resumed. Each now makes its checkpoint unusable: load_checkpoint falls back to the
// older one naming the tensor and the value, and cohort-ckpt verify says BAD.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/counter_values.h"
#include "cohort/checkpoint.h"
#include "support/errors.h"
#include "support/multiproc.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_step_tensors_test {

namespace fs = std::filesystem;

// Two parameters' Adam state, their steps saved as tensors as the pipeline saves them.
struct AdamSteps : cohort::Stateful {
  int64_t step_a = 3, step_b = 3;
  bool save_step_b = true;
  torch::Tensor exp_avg_a = torch::ones({2}), exp_avg_b = torch::ones({2}), sq_a = torch::ones({2}), sq_b = torch::ones({2});
  torch::Tensor a = torch::zeros({1}, torch::kLong), b = torch::zeros({1}, torch::kLong);
  bool tensors_optional() const override { return true; }
  std::vector<cohort::StateTensor> state_tensors() override {
    a.fill_(step_a);
    b.fill_(step_b);
    std::vector<cohort::StateTensor> out = {{"fc.weight.exp_avg", exp_avg_a, cohort::StateKind::kOwned},
                                            {"fc.weight.exp_avg_sq", sq_a, cohort::StateKind::kOwned},
                                            {"fc.weight.step", a, cohort::StateKind::kOwned},
                                            {"fc.bias.exp_avg", exp_avg_b, cohort::StateKind::kOwned},
                                            {"fc.bias.exp_avg_sq", sq_b, cohort::StateKind::kOwned}};
    if (save_step_b) out.push_back({"fc.bias.step", b, cohort::StateKind::kOwned});
    return out;
  }
  cohort::StateValues state_values() const override { return {{"g0.lr", 0.1}, {"pipeline.params", 2}}; }
};

struct Run {
  int code;
  std::string out;
};

// step-4 sound, step-8 saved with `edit` applied: the resume's step and skip, and verify's output.
std::pair<std::string, Run> resume_and_verify(const std::function<void(AdamSteps&)>& edit) {
  char name[] = "/tmp/checkpoint_steps_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  AdamSteps saved;
  for (int64_t step : {4, 8}) {
    if (step == 8) edit(saved);
    cohort::CheckpointState state;
    state.add("optimizer", saved)
        .set(cohort::detail::ckpt::kTrainerStepBatchKey, "32")
        .set("trainer.global_batch", "32")
        .set_step(step);
    cohort::save_checkpoint(dir, state);
  }
  AdamSteps loaded;
  cohort::CheckpointState state;
  state.add("optimizer", loaded);
  ::testing::internal::CaptureStderr();
  const auto info = cohort::load_checkpoint(dir, state);
  ::testing::internal::GetCapturedStderr();
  std::string resumed = info ? "step " + std::to_string(info->step) : "nothing";
  if (info && !info->skipped.empty()) resumed += ", skipped " + info->skipped[0];
  const auto tool = cohort::testing::run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + dir + "/step-8");
  fs::remove_all(dir);
  const auto short_dir = [&](std::string text) {  // the temporary directory as "D"
    for (size_t at; (at = text.find(dir)) != std::string::npos;) text.replace(at, dir.size(), "D");
    return text;
  };
  return {short_dir(resumed), {tool.code, short_dir(tool.out)}};
}

TEST(CheckpointStepTensors, AStepNoRunSavesFallsBackAndVerifiesBad) {
  const auto bad = [](int64_t value, const std::string& why) {
    const auto [resumed, verify] = resume_and_verify([&](AdamSteps& s) { s.step_a = value; });
    EXPECT_EQ(resumed, "step 4, skipped D/step-8: D/step-8/shard-00000-of-00001.bin: tensor 'optimizer/fc.weight.step' is " +
                           std::to_string(value) + ", outside 1..8 (" + why + ")");
    EXPECT_EQ(verify.code, 1) << value;
    EXPECT_EQ(verify.out, "cohort-ckpt: D/step-8/shard-00000-of-00001.bin: tensor 'optimizer/fc.weight.step' is " +
                              std::to_string(value) +
                              ", outside 1..8 (" + why + ")\nD/step-8: BAD (1 problem(s))\n");
  };
  const std::string why = "its parameter's optimizer state is made at its first step, and the Trainer took 8";
  bad(-1, why);
  bad(0, why);
  bad(9, why);
  bad(int64_t{1} << 62, why);
  const auto [resumed, verify] = resume_and_verify([](AdamSteps& s) { s.step_a = 8; });
  EXPECT_EQ(resumed, "step 8");
  EXPECT_EQ(verify.code, 0) << verify.out;
}

TEST(CheckpointStepTensors, ADeletedStepFallsBackAndVerifiesBad) {
  const auto [resumed, verify] = resume_and_verify([](AdamSteps& s) { s.save_step_b = false; });
  const std::string why = "'optimizer' has no tensor 'fc.bias.step': its parameters' step counts are tensors, and "
                          "'fc.bias' has optimizer state made at its first step";
  EXPECT_EQ(resumed, "step 4, skipped D/step-8: D/step-8/manifest.json: " + why);
  EXPECT_EQ(verify.code, 1);
  EXPECT_EQ(verify.out, "cohort-ckpt: D/step-8/manifest.json: " + why + "\nD/step-8: BAD (1 problem(s))\n");
}

}  // namespace checkpoint_step_tensors_test
