// Manifest values a resume cannot take (probe D5-D9): a sampler position that crashed the resume
// (samples_in_epoch -1000 or 2^70) or silently changed the run (1e12, epoch -3), a step of -5 or of
// another directory, "tensors": null. Each makes its checkpoint unusable: load_checkpoint falls back to
// the older one naming the file, the key and the value, and cohort-ckpt verify says BAD. Type errors
// name the whole key; info prints whole numbers exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "checkpoint/counter_values.h"
#include "checkpoint/manifest.h"
#include "cohort/checkpoint.h"
#include "cohort/safetensors.h"
#include "support/errors.h"
#include "support/manifest_seal.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_values_test {

namespace fs = std::filesystem;
using cohort::testing::error_of;
using cohort::testing::ToolRun;
using ::testing::HasSubstr;
using Change = std::function<void(nlohmann::json&)>;

namespace {

constexpr int64_t kSamples = 2318941;  // the gpt example's dataset in the probe: %g printed 2.31894e+06

ToolRun tool(const std::string& args) { return cohort::testing::run_tool("tools/cohort_ckpt/cohort-ckpt", args); }

// A checkpoint directory with step-10 and step-20 of a model and a sampler (epoch 3, 48 samples into
// it); edit() rewrites step-20's manifest.
struct Fixture {
  Fixture() {
    char name[] = "/tmp/checkpoint_values_XXXXXX";
    dir = ::mkdtemp(name);
    step = dir + "/step-20";
    manifest = step + "/manifest.json";
    for (int64_t saved : {10, 20}) {
      cohort::DistributedSampler sampler(kSamples, cohort::SamplerOptions().num_replicas(1).rank(0));
      sampler.set_epoch(3);
      int64_t samples = 48;
      cohort::CheckpointState state;
      state.add("model", *model).add("sampler", sampler, samples).set_step(saved);
      cohort::save_checkpoint(dir, state);
    }
    std::ifstream in(manifest);
    std::stringstream text;
    text << in.rdbuf();
    original = text.str();
  }
  ~Fixture() { fs::remove_all(dir); }

  // Resealed (unless `reseal` is false): the checks behind the checksums are what these tests reach.
  void edit(const Change& change, bool reseal = true) {
    auto j = nlohmann::json::parse(original);
    change(j);
    if (reseal) cohort::testing::reseal_manifest(j);
    std::ofstream(manifest, std::ios::trunc) << j.dump();
  }
  // A resume: the step it loaded and why it skipped step-20 ("" when it did not).
  std::pair<int64_t, std::string> resume() {
    cohort::DistributedSampler sampler(kSamples, cohort::SamplerOptions().num_replicas(1).rank(0));
    int64_t samples = 0;
    cohort::CheckpointState state;
    state.add("model", *model).add("sampler", sampler, samples);
    ::testing::internal::CaptureStderr();  // the fallback's warning
    const auto info = cohort::load_checkpoint(dir, state);
    ::testing::internal::GetCapturedStderr();
    if (!info) return {-1, "nothing loaded"};
    return {info->step, info->skipped.empty() ? "" : info->skipped[0]};
  }
  // Each change makes step-20 unusable with `why` (after "<manifest>: "): resume takes step-10, verify
  // says BAD.
  void expect_unusable(const std::vector<std::pair<Change, std::string>>& cases) {
    for (const auto& [change, why] : cases) {
      edit(change);
      const std::string problem = manifest + ": " + why;
      EXPECT_EQ(resume(), std::make_pair(int64_t(10), step + ": " + problem));
      const ToolRun verify = tool("verify " + dir);
      EXPECT_EQ(verify.code, 1) << why;
      EXPECT_EQ(verify.out, "cohort-ckpt: " + problem + "\n" + step + ": BAD (1 problem(s))\n");
    }
  }

  std::string dir, step, manifest, original;
  cohort::testing::Mlp model;
};

Change sampler_value(const char* key, double value) {
  return [=](nlohmann::json& j) { j["values"]["sampler"][key] = value; };
}

}  // namespace

// Probe D6, D7: -1000 and 2^70 crashed the resume with SIGSEGV, 1e12 skipped the epoch and epoch -3
// trained another order, all while verify said OK.
TEST(CheckpointValues, ASamplerPositionNoSamplerReachesFallsBackAndVerifiesBad) {
  Fixture f;
  const std::string range = ", outside 0..4637883 (no epoch of 2318941 samples over 1 rank(s) reaches further)";
  f.expect_unusable({
      {sampler_value("samples_in_epoch", -1000), "'values.sampler.samples_in_epoch' is -1000" + range},
      {sampler_value("samples_in_epoch", 1180591620717411303424.0),
       "'values.sampler.samples_in_epoch' is 1.1805916207174113e+21" + range},
      {sampler_value("samples_in_epoch", 1e12), "'values.sampler.samples_in_epoch' is 1000000000000" + range},
      {sampler_value("samples_in_epoch", 4637884), "'values.sampler.samples_in_epoch' is 4637884" + range},
      {sampler_value("epoch", -3), "'values.sampler.epoch' is -3, outside 0..9007199254740991 (2^53 - 1)"},
      {sampler_value("epoch", 1.5), "'values.sampler.epoch' is 1.5, not a whole number"},
  });
  f.edit(sampler_value("samples_in_epoch", 4637883));  // the bound itself is a position a sampler may save
  EXPECT_EQ(f.resume().first, 20);
}

// Hostile pass 6: a number no sampler saves ("epochs", a typo of a hand edit) was taken silently.
TEST(CheckpointValues, ANumberNoSamplerSavesMakesTheCheckpointUnusable) {
  Fixture f;
  f.expect_unusable({{sampler_value("epochs", 3),
                      "'values.sampler.epochs' is not a number a sampler saves (epoch, "
                      "samples_in_epoch, dataset_size, seed, shuffle)"}});
}

// Hostile pass 7, S2: a sampler's number deleted verified OK, and the resume failed on every rank
// without naming the file or falling back.
TEST(CheckpointValues, ASamplerNumberDeletedMakesTheCheckpointUnusable) {
  Fixture f;
  const auto without = [](const char* key) { return [=](nlohmann::json& j) { j["values"]["sampler"].erase(key); }; };
  f.expect_unusable({
      {without("seed"),
       "'values.sampler' has no 'seed': a sampler saves epoch, samples_in_epoch, dataset_size, seed "
       "and shuffle"},
      {without("dataset_size"),
       "'values.sampler' has no 'dataset_size': a sampler saves epoch, samples_in_epoch, "
       "dataset_size, seed and shuffle"},
  });
}

// Probe D8: step -5 verified OK and then failed the resume in set_step without falling back; a null
// tensor list read as a model without tensors.
TEST(CheckpointValues, ABadStepOrTensorListFallsBackAndVerifiesBad) {
  Fixture f;
  f.expect_unusable({
      {[](nlohmann::json& j) { j["step"] = -5; }, "'step' is -5, not a step count (0 or more)"},
      {[](nlohmann::json& j) { j["step"] = 7; }, "'step' is 7, but its directory is step-20"},
      {[](nlohmann::json& j) { j["tensors"] = nullptr; }, "'tensors' is null, not a list"},
      {[](nlohmann::json& j) {
         j["files"] = {{"name", "x"}};
       },
       "'files' is {\"name\":\"x\"}, not a list"},
  });
  // Hostile pass 9: shown as the size a shard "expects" (-9223372036854775777), or verified OK.
  const std::string file = nlohmann::json::parse(f.original)["files"][0]["name"];
  f.expect_unusable({
      {[](nlohmann::json& j) { j["files"][0]["payload_bytes"] = INT64_MAX; },
       "file '" + file + "' has payload_bytes 9223372036854775807, outside 0..2^60"},
      {[](nlohmann::json& j) { j["files"][0]["rank"] = -1; }, "file '" + file + "' has rank -1, outside 0..0"},
      {[](nlohmann::json& j) { j["files"].push_back(j["files"][0]); }, "file '" + file + "' is listed twice"},
      // Hostile pass 12, m-2: a second file of one rank (none on disk) verified OK.
      {[](nlohmann::json& j) {
         j["files"].push_back({{"name", "shard-x.bin"}, {"rank", 0}, {"payload_bytes", 0}});
       },
       "file 'shard-x.bin' is rank 0's second file: each rank writes one shard"},
  });
}

// Hostile pass 5, m1: a loss sum or position edited within its range went unnoticed (the numbers had
// no checksum), and deleting 'user_crc32' turned its check off. From format version 2 both checksums
// are required; a version-1 manifest without them (as cohort wrote before) still loads.
TEST(CheckpointValues, EditedNumbersOrAMissingChecksumMakeTheCheckpointUnusable) {
  Fixture f;
  const auto edited = [&](const Change& change) {
    f.edit(change, false);
    return f.resume();
  };
  const std::string unusable = f.step + ": " + f.manifest + ": ";
  auto [step, why] = edited(sampler_value("samples_in_epoch", 40));
  EXPECT_EQ(step, 10);
  EXPECT_THAT(why, HasSubstr(unusable + "'values_crc32' is "));
  EXPECT_THAT(why, HasSubstr(": edited or damaged after the save"));
  for (const char* key : {"values_crc32", "user_crc32"}) {
    EXPECT_EQ(edited([&](nlohmann::json& j) { j.erase(key); }),
              std::make_pair(int64_t(10), unusable + "'" + key + "' is missing"));
  }
  // Hostile pass 6, M3: a version below 1 (never written) was taken, and with it no checksum checked.
  for (int version : {0, -7}) {
    EXPECT_EQ(edited([&](nlohmann::json& j) {
                j["format_version"] = version;
                j.erase("values_crc32");
              }),
              std::make_pair(int64_t(10), unusable + "'format_version' is " + std::to_string(version) +
                                              ", not a version cohort wrote (1 to 5)"));
  }
  // Hostile pass 11, M-e: two tensors' names exchanged (the same shape and type) verified OK and
  // resumed each into the other; the records have their checksum from version 3.
  const auto swap_names = [](nlohmann::json& j) {
    auto& t = j["tensors"];
    for (size_t a = 0; a < t.size(); ++a)
      for (size_t b = a + 1; b < t.size(); ++b)
        if (t[a]["shape"] == t[b]["shape"] && t[a]["dtype"] == t[b]["dtype"]) return std::swap(t[a]["name"], t[b]["name"]);
    ADD_FAILURE() << "no two tensors of one shape";
  };
  const auto swapped = edited(swap_names);
  EXPECT_EQ(swapped.first, 10);
  EXPECT_THAT(swapped.second, HasSubstr(unusable + "'records_crc32' is "));
  EXPECT_THAT(swapped.second, HasSubstr(" but the header, files and tensor records it covers give "));
  EXPECT_EQ(edited([](nlohmann::json& j) { j.erase("records_crc32"); }),
            std::make_pair(int64_t(10), unusable + "'records_crc32' is missing"));
  // A version-2 manifest (none of the records) loads, and verify says what it cannot see.
  EXPECT_EQ(edited([](nlohmann::json& j) {
              j["format_version"] = 2;
              j.erase("records_crc32");
            }).first,
            20);
  const ToolRun verify2 = tool("verify " + f.dir);
  EXPECT_EQ(verify2.code, 0) << verify2.out;
  EXPECT_EQ(verify2.out, f.step +
                             ": OK (every file matches the manifest; format version 2 carries no checksum of "
                             "its tensor records, so an edit of them cannot be seen)\n");
  EXPECT_EQ(edited([](nlohmann::json& j) {
              j["format_version"] = 1;
              j.erase("values_crc32");
              j.erase("user_crc32");
              j.erase("records_crc32");
            }).first,
            20);
  // Hostile pass 7, M3: such a manifest verified "OK (every file and checksum matches)"; it says
  // what it cannot see.
  const ToolRun verify = tool("verify " + f.dir);
  EXPECT_EQ(verify.code, 0) << verify.out;
  EXPECT_EQ(verify.out, f.step +
                            ": OK (every file matches the manifest; format version 1 carries no checksum of "
                            "its numbers, so an edit of them cannot be seen)\n");
}

// Hostile pass 6, S1: an Adam step count of -5 (resealed) verified OK and resumed to a model at 10%
// accuracy, a learning rate of -1 would climb the loss; counters are held to their ranges as the
// sampler's position is: the checkpoint is unusable, resume takes the older one, verify says BAD.
TEST(CheckpointValues, AnOptimizerCounterNoRunHasFallsBackAndVerifiesBad) {
  Fixture f;
  cohort::testing::Mlp model;
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  model->forward(torch::ones({2, 20})).sum().backward();
  adam.step();
  const std::string root = f.dir + "/adam";
  for (int64_t saved : {10, 20}) {
    cohort::CheckpointState state;
    state.add("model", *model).add("optimizer", adam).set_step(saved);
    cohort::save_checkpoint(root, state);
  }
  std::ifstream in(root + "/step-20/manifest.json");
  const auto original = nlohmann::json::parse(in);
  const std::string manifest = root + "/step-20/manifest.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"g0.p0.step", "-5, outside -1..9007199254740991 (-1: no state yet)"},
      {"g0.p1.step", "2.5, not a whole number"},
      {"g0.lr", "-1, not a learning rate (0 to 1e+06: no optimizer trains at a larger one)"},
      {"g0.lr", "1e+300, not a learning rate (0 to 1e+06: no optimizer trains at a larger one)"},
      // Adam's bias correction overflowed a float with 3e38 (hostile pass 10, S4).
      {"g0.lr", "3e+38, not a learning rate (0 to 1e+06: no optimizer trains at a larger one)"},
      {"g0.p0.step", "1, but there is no tensor 'optimizer/g0.p0.*': a parameter's optimizer state is saved with "
                     "its step"},
  };
  // Hostile pass 12, S-1: a parameter's Adam moments deleted (resealed), its step kept.
  const auto without_moments = [](nlohmann::json j) {
    auto& t = j["tensors"];
    t.erase(std::remove_if(t.begin(), t.end(), [](const nlohmann::json& r) {
              return r["name"] == "optimizer/g0.p0.exp_avg" || r["name"] == "optimizer/g0.p0.exp_avg_sq";
            }),
            t.end());
    return j;
  };
  for (const auto& [key, why] : cases) {
    auto j = original;
    if (key == "g0.p0.step" && why.rfind("1,", 0) == 0) {
      j = without_moments(j);
    } else {
      j["values"]["optimizer"][key] = std::stod(why.substr(0, why.find(',')));
    }
    cohort::testing::reseal_manifest(j);
    std::ofstream(manifest, std::ios::trunc) << j.dump();
    const std::string problem = manifest + ": 'values.optimizer." + key + "' is " + why;
    cohort::CheckpointState state;
    state.add("model", *model).add("optimizer", adam);
    ::testing::internal::CaptureStderr();  // the fallback's warning
    const auto info = cohort::load_checkpoint(root, state);
    ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(info.has_value()) << key;
    EXPECT_EQ(info->step, 10) << key;
    ASSERT_FALSE(info->skipped.empty()) << key;
    EXPECT_EQ(info->skipped[0], root + "/step-20: " + problem);
    const ToolRun verify = tool("verify " + root);
    EXPECT_EQ(verify.code, 1) << key;
    EXPECT_EQ(verify.out, "cohort-ckpt: " + problem + "\n" + root + "/step-20: BAD (1 problem(s))\n");
  }
}

// The ZeRO engine's counters by the same rule (its entry is checked as the optimizer's is above).
TEST(CheckpointValues, TheEnginesStepCountsAndLossScaleAreHeldToTheirRanges) {
  using cohort::detail::ckpt::check_counter_values;
  const auto error = [](const char* key, double value) {
    return error_of([&] { check_counter_values({{key, value}}, "engine"); });
  };
  EXPECT_EQ(error("zero.group3.step", -5),
            "'values.engine.zero.group3.step' is -5, outside 0..9007199254740991 (2^53 - 1)");
  const std::string not_a_scale = ", not a loss scale (more than 0, at most 3.4028234663852886e+38: a float's largest)";
  EXPECT_EQ(error("zero.loss_scaler.scale", 0), "'values.engine.zero.loss_scaler.scale' is 0" + not_a_scale);
  EXPECT_EQ(error("zero.loss_scaler.scale", 1e300 * 1e300),
            "'values.engine.zero.loss_scaler.scale' is inf" + not_a_scale);
  // Hostile pass 8, S2: 4e38 fits a double, not the float the loss is scaled in: every resume ended in NaN.
  EXPECT_EQ(error("zero.loss_scaler.scale", 4e38), "'values.engine.zero.loss_scaler.scale' is 4e+38" + not_a_scale);
  // Hostile pass 8, S1: the scaler's counters were cast unchecked.
  EXPECT_EQ(error("zero.loss_scaler.iter", 1e300),
            "'values.engine.zero.loss_scaler.iter' is 1e+300, outside 0..9007199254740991 (2^53 - 1)");
  EXPECT_EQ(error("zero.loss_scaler.last_overflow_iter", -2),
            "'values.engine.zero.loss_scaler.last_overflow_iter' is -2, outside -1..9007199254740991 (-1: none yet)");
  EXPECT_EQ(error("zero.loss_scaler.hysteresis_left", 1e10),
            "'values.engine.zero.loss_scaler.hysteresis_left' is 10000000000, outside 0..2147483647");
  EXPECT_NO_THROW(check_counter_values({{"zero.loss_scaler.last_overflow_iter", -1}}, "engine"));
  // Hostile pass 7, S1: the engine's own counters were cast to integers unchecked.
  EXPECT_EQ(error("zero.micro_steps", 1e300),
            "'values.engine.zero.micro_steps' is 1e+300, outside 0..9007199254740991 (2^53 - 1)");
  EXPECT_EQ(error("zero.global_steps", -3),
            "'values.engine.zero.global_steps' is -3, outside 0..9007199254740991 (2^53 - 1)");
  EXPECT_EQ(error("zero.skipped_steps", 0.5), "'values.engine.zero.skipped_steps' is 0.5, not a whole number");
  EXPECT_EQ(error("zero.fp16", 2), "'values.engine.zero.fp16' is 2, outside 0..1 (false or true)");
  EXPECT_NO_THROW(check_counter_values({{"zero.loss_scaler.scale", 65536}, {"zero.group3.step", 7}}, "engine"));
  EXPECT_EQ(error_of([] {
              check_counter_values({{"zero.global_steps", 2}, {"zero.bogus", 1}}, "engine");
            }),
            "'values.engine.zero.bogus' is 1: the ZeRO engine saves no such number");
}

// Hostile pass 8, M1: each counter in range, but a global_steps of 2 at the Trainer's step 8 verified
// OK and resumed on another WarmupLR schedule; the counters are held to each other and to the step.
TEST(CheckpointValues, TheEnginesCountersAgreeWithEachOtherAndTheTrainersStep) {
  using cohort::detail::ckpt::check_counters_agree;
  const cohort::StateValues good = {{"zero.global_steps", 8},
                                    {"zero.skipped_steps", 1},
                                    {"zero.micro_steps", 16},
                                    {"zero.group0.step", 7},
                                    {"zero.group1.step", 0}};  // SGD keeps no count
  EXPECT_NO_THROW(check_counters_agree(good, "engine", 8, true));
  EXPECT_NO_THROW(check_counters_agree(good, "engine", 3, false));  // a step of the user's own numbering
  EXPECT_NO_THROW(check_counters_agree({{"g0.p0.step", 3}}, "optimizer", 8, true));  // not the engine's
  const auto error = [&](const char* key, double value, int64_t step = 8) {
    auto values = good;
    values[key] = value;
    return error_of([&] { check_counters_agree(values, "engine", step, true); });
  };
  EXPECT_EQ(error("zero.global_steps", 2, 2),
            "'values.engine.zero.global_steps' is 2 and 'zero.group0.step' 7 (skipped 1): a group stepped more "
            "often than the engine");
  EXPECT_EQ(error("zero.skipped_steps", 9),
            "'values.engine.zero.global_steps' is 8 and 'zero.skipped_steps' 9: more steps skipped than taken");
  EXPECT_EQ(error("zero.micro_steps", 3),
            "'values.engine.zero.global_steps' is 8 and 'zero.micro_steps' 3: more optimizer steps than micro-batches");
  EXPECT_EQ(
      error("zero.global_steps", 12),
      "'values.engine.zero.global_steps' is 12 at the Trainer's step 8: the engine steps once per optimizer step");
  // Hostile pass 10, M1: skipped steps (and group steps to match) in an fp32 run trained other bits.
  EXPECT_EQ(error("zero.fp16", 0), "'values.engine.zero.skipped_steps' is 1 in a run without fp16 ('zero.fp16' 0): "
                                   "only fp16's loss scaling skips a step");
  auto fp16 = good;
  fp16["zero.fp16"] = 1;
  EXPECT_NO_THROW(check_counters_agree(fp16, "engine", 8, true));
  auto fp32 = good;
  fp32["zero.fp16"] = 0;
  fp32["zero.skipped_steps"] = 0;
  fp32["zero.group0.step"] = 8;
  EXPECT_NO_THROW(check_counters_agree(fp32, "engine", 8, true));
}

// Hostile pass 9, M2: a seed past 2^53 was saved rounded (as a double), and a resume with the rounded
// seed, another shuffle, passed the check; 2^53 + 1 rounds to 2^53, so the bound is checked as integers.
TEST(CheckpointValues, ASeedADoubleCannotHoldIsRefusedAtSave) {
  char name[] = "/tmp/checkpoint_seed_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  const int64_t exact = int64_t(1) << 53;
  for (const int64_t seed : {exact, exact + 1}) {
    cohort::DistributedSampler sampler(100, cohort::SamplerOptions().num_replicas(1).rank(0).seed(seed));
    int64_t samples = 0;
    cohort::CheckpointState state;
    state.add("sampler", sampler, samples).set_step(seed == exact ? 1 : 2);
    if (seed == exact) {
      EXPECT_NO_THROW(cohort::save_checkpoint(dir, state));
    } else {
      EXPECT_THAT(error_of([&] { cohort::save_checkpoint(dir, state); }),
                  HasSubstr("the sampler's seed 9007199254740993 cannot be saved exactly"));
    }
  }
  fs::remove_all(dir);
}

// Hostile pass 9, S1: a deleted number was read as its default (a group's Adam step as 0: another
// bias correction, other bits) while verify said OK; a group with Adam's state steps with the engine.
TEST(CheckpointValues, EveryEngineNumberIsThereAndAnAdamGroupStepsWithTheEngine) {
  using cohort::detail::ckpt::check_entry_counters;
  cohort::detail::ckpt::Manifest m;
  m.step = 8;
  m.values["engine"] = {{"zero.global_steps", 8},
                        {"zero.micro_steps", 8},
                        {"zero.skipped_steps", 1},
                        {"zero.group0.step", 7},
                        {"zero.group1.step", 0},
                        {"zero.loss_scaler.scale", 1},
                        {"zero.loss_scaler.iter", 0},
                        {"zero.loss_scaler.last_overflow_iter", -1},
                        {"zero.loss_scaler.hysteresis_left", 2}};
  m.values["optimizer"] = {{"g0.lr", 0.1}, {"g0.params", 1}, {"g0.p0.step", 3}, {"g1.lr", 0.1}, {"g1.params", 1}};
  for (const char* name : {"engine/group0.master", "engine/group0.exp_avg", "engine/group1.momentum_buffer",
                           "optimizer/g0.p0.exp_avg", "optimizer/g0.p0.exp_avg_sq", "optimizer/g1.p0.momentum_buffer"}) {
    m.tensors.emplace_back();
    m.tensors.back().name = name;
  }
  const auto error = [&](const std::string& entry) { return error_of([&] { check_entry_counters(m, entry); }); };
  EXPECT_EQ(error("optimizer"),
            "'values.optimizer' has no 'g1.p0.step': a parameter saved with optimizer state "
            "('momentum_buffer') has one");
  m.values["optimizer"]["g1.p0.step"] = 0;  // SGD's momentum counts no steps
  EXPECT_NO_THROW(check_entry_counters(m, "optimizer"));
  m.values["optimizer"]["g0.p0.step"] = 0;  // Adam's moments come with its first step (hostile pass 10, M5)
  EXPECT_EQ(error("optimizer"), "'values.optimizer.g0.p0.step' is 0, but the parameter has 'exp_avg', which its "
                                "optimizer makes at its first step");
  m.values["optimizer"]["g0.p0.step"] = 3;
  m.user[cohort::detail::ckpt::kTrainerStepBatchKey] = "32";
  m.values["optimizer"]["g0.p0.step"] = 9;
  EXPECT_EQ(error("optimizer"), "'values.optimizer.g0.p0.step' is 9, more optimizer steps than the Trainer's 8");
  m.values["optimizer"]["g0.p0.step"] = 8;
  EXPECT_NO_THROW(check_entry_counters(m, "optimizer"));
  // Hostile pass 12, S-1: a step whose state's tensors are gone, or half of Adam's.
  m.values["optimizer"]["g0.p2.step"] = 8;
  EXPECT_EQ(error("optimizer"), "'values.optimizer.g0.p2.step' is 8, but there is no tensor 'optimizer/g0.p2.*': a "
                                "parameter's optimizer state is saved with its step");
  m.values["optimizer"].erase("g0.p2.step");
  m.tensors.erase(std::find_if(m.tensors.begin(), m.tensors.end(),
                               [](const auto& r) { return r.name == "optimizer/g0.p0.exp_avg_sq"; }));
  EXPECT_EQ(error("optimizer"),
            "tensor 'optimizer/g0.p0.exp_avg' has no 'exp_avg_sq' beside it: its optimizer saves them together");
  m.tensors.emplace_back();
  m.tensors.back().name = "optimizer/g0.p0.exp_avg_sq";
  EXPECT_NO_THROW(check_entry_counters(m, "engine"));
  m.values["engine"]["zero.group0.step"] = 4;
  EXPECT_EQ(error("engine"),
            "'values.engine.zero.group0.step' is 4, not the engine's 7 steps taken (global_steps - "
            "skipped_steps) for a group with 'exp_avg'");
  m.values["engine"].erase("zero.group1.step");
  m.values["engine"]["zero.group0.step"] = 7;
  EXPECT_EQ(error("engine"),
            "'values.engine' has no 'zero.group1.step': the ZeRO engine saves a step count for each "
            "group");
  m.values["engine"].erase("zero.loss_scaler.iter");
  EXPECT_EQ(error("engine"),
            "'values.engine' has no 'zero.loss_scaler.iter': the ZeRO engine saves it with every "
            "checkpoint");
  // Hostile pass 10, S3: without global_steps the numbers were not taken for the engine's at all.
  m.values["engine"]["zero.loss_scaler.iter"] = 0;
  m.values["engine"].erase("zero.global_steps");
  EXPECT_EQ(error("engine"),
            "'values.engine' has no 'zero.global_steps': the ZeRO engine saves it with every "
            "checkpoint");
  // Hostile pass 11, S-c: every number deleted but zero_stage, and Adam restarted at step 0.
  m.values["engine"] = {{"zero_stage", 2}};
  EXPECT_EQ(error("engine"),
            "'values.engine' has no 'zero.global_steps': the ZeRO engine saves it with every "
            "checkpoint");
}

// The same through a save, a resume (falls back) and cohort-ckpt verify (BAD).
TEST(CheckpointValues, EngineCountersThatDisagreeMakeTheCheckpointUnusable) {
  struct Counters : cohort::Stateful {
    std::vector<cohort::StateTensor> state_tensors() override { return {}; }
    cohort::StateValues state_values() const override {
      return {{"zero_stage", 0},
              {"zero.global_steps", 8},
              {"zero.micro_steps", 8},
              {"zero.skipped_steps", 0},
              {"zero.group0.step", 8},
              {"zero.loss_scaler.scale", 1},
              {"zero.loss_scaler.iter", 0},
              {"zero.loss_scaler.last_overflow_iter", -1},
              {"zero.loss_scaler.hysteresis_left", 2}};
    }
  } counters;
  Fixture f;
  const std::string root = f.dir + "/engine";
  for (int64_t saved : {4, 8}) {
    cohort::CheckpointState state;
    state.add("engine", counters)
        .set(cohort::detail::ckpt::kTrainerStepBatchKey, "32")
        .set("trainer.global_batch", "32")
        .set_step(saved);
    cohort::save_checkpoint(root, state);
  }
  cohort::CheckpointState state;
  state.add("engine", counters);
  ::testing::internal::CaptureStderr();
  const auto info = cohort::load_checkpoint(root, state);
  ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step, 8);
  EXPECT_TRUE(info->skipped.empty());
  // step-4's counters say 8: the engine's global_steps against the Trainer's step 4.
  const std::string problem = root +
                              "/step-4/manifest.json: 'values.engine.zero.global_steps' is 8 at the "
                              "Trainer's step 4: the engine steps once per optimizer step";
  const ToolRun verify = tool("verify " + root + "/step-4");
  EXPECT_EQ(verify.code, 1);
  EXPECT_EQ(verify.out, "cohort-ckpt: " + problem + "\n" + root + "/step-4: BAD (1 problem(s))\n");
  fs::remove_all(root + "/step-8");
  std::ofstream(root + "/latest", std::ios::trunc) << "step-4";
  ::testing::internal::CaptureStderr();
  const std::string refused = error_of([&] { cohort::load_checkpoint(root, state); });
  ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(refused, HasSubstr(problem));
}

// Hostile pass 6: the header's zero_stage (what inspect shows) was never compared with the engine's
// own (what a resume compares with its run): an edited header showed one mode and resumed another.
TEST(CheckpointValues, AHeaderModeTheValuesDoNotShareMakesTheCheckpointUnusable) {
  Fixture f;
  f.expect_unusable(
      {{[](nlohmann::json& j) { j["zero_stage"] = 3; }, "'zero_stage' is 3 but the values say DDP (no ZeRO engine)"},
       {[](nlohmann::json& j) { j["values"]["model"]["zero_stage"] = 1e300; },
        "'values.model.zero_stage' is 1e+300, not a ZeRO stage (0 to 3)"},
       // Hostile pass 10, M6: a stage-0 engine without its stage read as DDP, and the resume stopped.
       {[](nlohmann::json& j) {
          j["values"]["engine"] = {{"zero.global_steps", 20},        {"zero.skipped_steps", 0},
                                   {"zero.micro_steps", 20},         {"zero.loss_scaler.scale", 1},
                                   {"zero.loss_scaler.iter", 0},     {"zero.loss_scaler.last_overflow_iter", -1},
                                   {"zero.loss_scaler.hysteresis_left", 2}};
        },
        "'values.engine' has the ZeRO engine's numbers but no 'zero_stage'"}});
}

// Probe D9: "'values' has the wrong type ({"engine":{...200 characters of other values".
TEST(CheckpointValues, TypeErrorsNameTheWholeKeyAndTheValue) {
  Fixture f;
  const auto error = [&](const Change& change) {
    f.edit(change);
    return error_of([&] { cohort::detail::ckpt::read_manifest(f.manifest); });
  };
  EXPECT_EQ(error([](nlohmann::json& j) { j["values"]["sampler"]["seed"] = "abc"; }),
            f.manifest + ": 'values.sampler.seed' is \"abc\", not a number");
  EXPECT_EQ(error([](nlohmann::json& j) { j["values"]["sampler"] = {1}; }),
            f.manifest + ": 'values.sampler' is [1], not an object");
  EXPECT_EQ(error([](nlohmann::json& j) { j["user"]["trainer.global_batch"] = 32; }),
            f.manifest + ": 'user.trainer.global_batch' is 32, not a string");
}

// Probe D5: info printed dataset_size=2.31894e+06 (a fraction: the fewest digits that read back the same).
TEST(CheckpointValues, InfoPrintsWholeNumbersExactlyAndOthersInFull) {
  Fixture f;
  f.edit([](nlohmann::json& j) { j["values"]["model"]["scale"] = 0.1; });
  const ToolRun info = tool("info " + f.dir);
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_THAT(info.out, HasSubstr("dataset_size=2318941, epoch=3, samples_in_epoch=48, seed=0, shuffle=1"));
  EXPECT_THAT(info.out, HasSubstr("scale=0.1"));
  EXPECT_THAT(info.out, ::testing::Not(HasSubstr("scale=0.10")));
}

// Hostile pass 5, m2: info printed a user value raw: its terminal escapes reached the terminal and
// 100 KB printed whole. A checkpoint may come from anyone: escaped and cut as messages quote them.
TEST(CheckpointValues, InfoEscapesAndCutsTheUserValues) {
  Fixture f;
  f.edit([](nlohmann::json& j) { j["user"]["evil"] = "\x1b[31mRED\r" + std::string(100000, 'A'); });
  const ToolRun info = tool("info " + f.dir);
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_EQ(info.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(info.out.find('\r'), std::string::npos);
  EXPECT_THAT(info.out, HasSubstr("... (100009 bytes)"));
  EXPECT_LT(info.out.size(), 5000u);
}

// A fifo where a safetensors file should be blocked the reader's open (as one did the IDX reader's).
TEST(CheckpointValues, SafetensorsReaderRefusesAFifoUnopened) {
  Fixture f;
  const std::string fifo = f.dir + "/model.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { cohort::load_safetensors(fifo); }),
            "safetensors file " + fifo + " is a fifo, not a regular file");
}

}  // namespace checkpoint_values_test
