// Hostile pass 12, M-4: a parameter's whole optimizer state deleted from a checkpoint (its tensors and
// its step, resealed) read as "no state yet", and Adam restarted its moments and bias correction while
// verify said OK. From format version 4 an optimizer's entry counts each group's parameters
// ('g0.params'; a pipeline's 'pipeline.params') and gives every parameter a step count, -1 before it
// has state: such a checkpoint is unusable (the resume falls back, verify says BAD), and one counted
// for another optimizer is refused by the optimizer it is loaded into. Pass 13: the entry emptied, part
// of a parameter's fields or a group's rate deleted, Adagrad without state, and state a load must clear.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "checkpoint/counter_values.h"
#include "checkpoint/manifest.h"
#include "cohort/checkpoint.h"
#include "support/errors.h"
#include "support/manifest_seal.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_optimizer_counts_test {

namespace fs = std::filesystem;
using cohort::detail::ckpt::check_entry_counters;
using cohort::testing::error_of;

void add_tensor(cohort::detail::ckpt::Manifest& m, const std::string& name, bool step = false) {
  m.tensors.emplace_back();
  m.tensors.back().name = name;
  if (!step) return;
  m.tensors.back().dtype = c10::ScalarType::Long;
  m.tensors.back().shape = {1};
  m.tensors.back().kind = cohort::StateKind::kOwned;
}

TEST(CheckpointOptimizerCounts, EveryParameterOfAGroupHasAStepCount) {
  cohort::detail::ckpt::Manifest m;
  m.step = 8;
  m.values["optimizer"] = {{"g0.lr", 0.1}, {"g0.params", 3}, {"g0.p0.step", 3}, {"g0.p1.step", -1}, {"g0.p2.step", 3}};
  for (const char* name : {"optimizer/g0.p0.exp_avg", "optimizer/g0.p0.exp_avg_sq", "optimizer/g0.p2.exp_avg",
                           "optimizer/g0.p2.exp_avg_sq"})
    add_tensor(m, name);
  const auto error = [&] { return error_of([&] { check_entry_counters(m, "optimizer"); }); };
  EXPECT_NO_THROW(check_entry_counters(m, "optimizer"));
  auto& values = m.values["optimizer"];
  values.erase("g0.p1.step");  // a parameter without state, its record deleted
  EXPECT_EQ(error(), "'values.optimizer' has no 'g0.p1.step', but 'g0.params' is 3: every parameter of a group has "
                     "a step count (-1: no state yet)");
  values["g0.p1.step"] = -1;
  values["g0.p7.step"] = -1;
  EXPECT_EQ(error(), "'values.optimizer.g0.p7.step' is -1, but 'g0.params' is 3: there is no parameter 7");
  values.erase("g0.p7.step");
  add_tensor(m, "optimizer/g0.p1.momentum_buffer");
  EXPECT_EQ(error(), "'values.optimizer.g0.p1.step' is -1, but the parameter has 'momentum_buffer': -1 says it has "
                     "no state");
  m.tensors.pop_back();
  values["g1.lr"] = 0.1;
  EXPECT_EQ(error(), "'values.optimizer.g1.lr' is 0.1, but there is no 'g1.params': every group of the optimizer "
                     "counts its parameters");
  values.erase("g1.lr");
  values.erase("g0.params");
  EXPECT_EQ(error(), "'values.optimizer' has 'g0.lr' but no count of its parameters ('g0.params', a pipeline's "
                     "'pipeline.params'): from format version 4 on, an optimizer's entry counts them");
  m.format_version = 3;  // written before the counts
  EXPECT_NO_THROW(check_entry_counters(m, "optimizer"));
}

// Hostile pass 13, S-2/S-3/S-5: part of a parameter's state deleted (RMSprop's square_avg resumed to NaN
// weights, AMSGrad's max, a momentum buffer), or a group's rate.
TEST(CheckpointOptimizerCounts, AParametersFieldsComeTogetherAndAGroupsAreAlike) {
  cohort::detail::ckpt::Manifest m;
  m.values["optimizer"] = {{"g0.lr", 0.1}, {"g0.params", 2}, {"g0.p0.step", 3}, {"g0.p1.step", 3}};
  for (const char* name : {"optimizer/g0.p0.square_avg", "optimizer/g0.p0.grad_avg", "optimizer/g0.p0.momentum_buffer",
                           "optimizer/g0.p1.square_avg", "optimizer/g0.p1.grad_avg", "optimizer/g0.p1.momentum_buffer"})
    add_tensor(m, name);
  EXPECT_NO_THROW(check_entry_counters(m, "optimizer"));
  const auto error = [&] { return error_of([&] { check_entry_counters(m, "optimizer"); }); };
  auto without = [&](const std::string& name) {
    auto copy = m;
    copy.tensors.erase(std::find_if(copy.tensors.begin(), copy.tensors.end(),
                                    [&](const auto& r) { return r.name == name; }));
    return error_of([&] { check_entry_counters(copy, "optimizer"); });
  };
  EXPECT_EQ(without("optimizer/g0.p1.square_avg"),
            "tensor 'optimizer/g0.p1.grad_avg' has no 'square_avg' beside it: its optimizer saves them together");
  EXPECT_EQ(without("optimizer/g0.p1.momentum_buffer"),
            "tensors 'optimizer/g0.p1.*' are {grad_avg, square_avg}, those of 'g0.p0' {grad_avg, momentum_buffer, "
            "square_avg}: one group's parameters hold the same state");
  m.values["optimizer"].erase("g0.lr");
  EXPECT_EQ(error(), "'values.optimizer' has 'g0.params' but no 'g0.lr': the optimizer saves each group's learning "
                     "rate");
  m.values["optimizer"]["g0.lr"] = 0.1;
  m.values["optimizer"]["g2.lr"] = 0.1;
  m.values["optimizer"]["g2.params"] = 0;
  EXPECT_EQ(error(), "'values.optimizer' has 'g2.params' but no 'g1.params': an optimizer's groups are numbered from "
                     "g0");
}

TEST(CheckpointOptimizerCounts, APipelineEntryHasAStepTensorForEachOfItsParameters) {
  cohort::detail::ckpt::Manifest m;
  m.values["optimizer"] = {{"g0.lr", 0.1}, {"pipeline.params", 2}};
  add_tensor(m, "optimizer/0.weight.exp_avg");
  add_tensor(m, "optimizer/0.weight.exp_avg_sq");
  add_tensor(m, "optimizer/0.weight.step", true);
  add_tensor(m, "optimizer/0.bias.step", true);  // -1: no state yet
  EXPECT_NO_THROW(check_entry_counters(m, "optimizer"));
  m.tensors.pop_back();
  const auto error = [&] { return error_of([&] { check_entry_counters(m, "optimizer"); }); };
  EXPECT_EQ(error(), "'values.optimizer.pipeline.params' is 2, but 'optimizer' has 1 step tensors "
                     "('<parameter>.step'): each trainable parameter of the pipeline has one (-1: no state yet)");
  add_tensor(m, "optimizer/0.bias.step", true);
  m.tensors.erase(m.tensors.begin() + 1);  // Adam's second moment gone (hostile pass 13, S-2)
  EXPECT_EQ(error(), "tensor 'optimizer/0.weight.exp_avg' has no 'exp_avg_sq' beside it: its optimizer saves them "
                     "together");
  m.values["optimizer"].erase("g0.lr");
  m.tensors.erase(m.tensors.begin());
  EXPECT_EQ(error(), "'values.optimizer' has 'pipeline.params' but no 'g0.lr': the optimizer saves its learning rate");
}

namespace {

// Adam over an MLP, stepped once with fc3's bias left out (no gradient: no state), saved at step 10
// and 20 in a fresh directory; edit() rewrites step-20's manifest, resealed.
struct Saved {
  Saved() : adam(model->parameters(), torch::optim::AdamOptions(1e-3)) {
    char name[] = "/tmp/optimizer_counts_XXXXXX";
    dir = ::mkdtemp(name);
    model->forward(torch::ones({2, 20})).sum().backward();
    model->fc3->bias.mutable_grad() = torch::Tensor();
    adam.step();
    for (int64_t step : {10, 20}) {
      cohort::CheckpointState state;
      state.add("model", *model).add("optimizer", adam).set_step(step);
      cohort::save_checkpoint(dir, state);
    }
    std::ifstream in(manifest());
    original = nlohmann::json::parse(in);
  }
  ~Saved() { fs::remove_all(dir); }
  std::string manifest() const { return dir + "/step-20/manifest.json"; }
  void edit(const std::function<void(nlohmann::json&)>& change) {
    auto j = original;
    change(j);
    cohort::testing::reseal_manifest(j);
    std::ofstream(manifest(), std::ios::trunc) << j.dump();
  }
  // The step a fresh Adam resumed at, why it skipped step-20 ("" when it did not), its states.
  std::tuple<int64_t, std::string, size_t> resume() {
    cohort::testing::Mlp fresh;
    torch::optim::Adam fresh_adam(fresh->parameters(), torch::optim::AdamOptions(1e-3));
    cohort::CheckpointState state;
    state.add("model", *fresh).add("optimizer", fresh_adam);
    ::testing::internal::CaptureStderr();  // the fallback's warning
    const auto info = cohort::load_checkpoint(dir, state);
    ::testing::internal::GetCapturedStderr();
    return {info->step, info->skipped.empty() ? "" : info->skipped[0], fresh_adam.state().size()};
  }
  cohort::testing::ToolRun verify() const {
    return cohort::testing::run_tool("tools/cohort_ckpt/cohort-ckpt", "verify " + dir + "/step-20");
  }

  cohort::testing::Mlp model;
  torch::optim::Adam adam;
  std::string dir;
  nlohmann::json original;
};

void erase_records(nlohmann::json& j, const std::string& prefix) {
  auto& t = j["tensors"];
  t.erase(std::remove_if(t.begin(), t.end(),
                         [&](const nlohmann::json& r) { return r["name"].get<std::string>().rfind(prefix, 0) == 0; }),
          t.end());
}

}  // namespace

TEST(CheckpointOptimizerCounts, AParameterWhoseWholeStateIsDeletedIsMissed) {
  Saved saved;
  EXPECT_EQ(saved.original["values"]["optimizer"]["g0.params"], 6);
  EXPECT_EQ(saved.original["values"]["optimizer"]["g0.p5.step"], -1);  // fc3's bias: no state
  EXPECT_EQ(saved.resume(), std::make_tuple(int64_t(20), std::string(), size_t(5)));
  EXPECT_EQ(saved.verify().code, 0) << saved.verify().out;

  saved.edit([](nlohmann::json& j) {  // fc1's bias: Adam's moments and step gone
    erase_records(j, "optimizer/g0.p1.");
    j["values"]["optimizer"].erase("g0.p1.step");
  });
  const std::string why = saved.manifest() +
                          ": 'values.optimizer' has no 'g0.p1.step', but 'g0.params' is 6: every parameter of a "
                          "group has a step count (-1: no state yet)";
  EXPECT_EQ(saved.resume(), std::make_tuple(int64_t(10), saved.dir + "/step-20: " + why, size_t(5)));
  const auto bad = saved.verify();
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.out, "cohort-ckpt: " + why + "\n" + saved.dir + "/step-20: BAD (1 problem(s))\n");

  // Its count lowered too: the optimizer it is loaded into has another number of parameters.
  saved.edit([](nlohmann::json& j) {
    j["values"]["optimizer"].erase("g0.p5.step");
    j["values"]["optimizer"]["g0.params"] = 5;
  });
  EXPECT_EQ(saved.resume(), std::make_tuple(int64_t(10),
                                            saved.dir + "/step-20: " + saved.manifest() +
                                                ": 'values.optimizer.g0.params' is 5, this optimizer's group 0 has 6 "
                                                "parameters: the checkpoint is another program's or was edited",
                                            size_t(5)));

  // Hostile pass 13, S-1: the entry emptied and its tensors deleted; a count is what format 4 saves.
  saved.edit([](nlohmann::json& j) {
    j["values"]["optimizer"] = nlohmann::json::object();
    erase_records(j, "optimizer/");
  });
  EXPECT_EQ(saved.resume(), std::make_tuple(int64_t(10),
                                            saved.dir + "/step-20: " + saved.manifest() +
                                                ": 'values.optimizer' has no 'g0.params': from format version 4 on an "
                                                "optimizer's entry counts each group's parameters (damaged or edited)",
                                            size_t(5)));

  // Format version 3 counted nothing: a parameter without a step has no state, and verify says so.
  saved.edit([](nlohmann::json& j) {
    j["format_version"] = 3;
    j["values"]["optimizer"].erase("g0.params");
    j["values"]["optimizer"].erase("g0.p5.step");
  });
  EXPECT_EQ(saved.resume(), std::make_tuple(int64_t(20), std::string(), size_t(5)));
  EXPECT_EQ(saved.verify().out, saved.dir +
                                    "/step-20: OK (every file and checksum matches the manifest; format version 3 "
                                    "does not count an optimizer's parameters, so the deletion of one's whole state "
                                    "cannot be seen)\n");
}

// Hostile pass 13, S-4: Adagrad makes every parameter's state with the optimizer, so "no state" (-1) is
// no run's; M-2: a parameter saved without state is left without it, whatever the optimizer held.
TEST(CheckpointOptimizerCounts, NoStateIsRefusedForAdagradAndClearsWhatTheOptimizerHeld) {
  char name[] = "/tmp/optimizer_states_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  cohort::testing::Mlp model;
  torch::optim::Adagrad adagrad(model->parameters(), torch::optim::AdagradOptions(0.1));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.1));
  const auto save = [&](const std::string& where, const std::string& entry, torch::optim::Optimizer& optimizer) {
    cohort::CheckpointState state;
    state.add(entry, optimizer).set_step(1);
    cohort::save_checkpoint(dir + "/" + where, state);
  };
  save("adagrad", "optimizer", adagrad);
  save("adam", "optimizer", adam);  // before its first step: no state
  model->forward(torch::ones({2, 20})).sum().backward();
  adam.step();
  ASSERT_EQ(adam.state().size(), size_t(6));
  cohort::CheckpointState state;
  state.add("optimizer", adam);
  cohort::load_checkpoint(dir + "/adam", state);
  EXPECT_EQ(adam.state().size(), size_t(0));

  const std::string manifest = dir + "/adagrad/step-1/manifest.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(manifest));
  j["values"]["optimizer"]["g0.p0.step"] = -1;
  erase_records(j, "optimizer/g0.p0.");
  cohort::testing::reseal_manifest(j);
  std::ofstream(manifest, std::ios::trunc) << j.dump();
  cohort::CheckpointState again;
  again.add("optimizer", adagrad);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(error_of([&] { cohort::load_checkpoint(dir + "/adagrad", again, cohort::LoadOptions().must_exist(true)); }),
            manifest + ": 'values.optimizer.g0.p0.step' is -1 (no state), but Adagrad makes every parameter's "
                       "state with the optimizer");
  ::testing::internal::GetCapturedStderr();
  fs::remove_all(dir);
}

}  // namespace checkpoint_optimizer_counts_test
