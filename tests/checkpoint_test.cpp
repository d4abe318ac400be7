// save_checkpoint/load_checkpoint in one process (a world of one): what is saved comes back
// bit for bit (model, optimizers, scheduler, sampler position, step, RNG, user values), saves are
// atomic, and bad input (missing directory, truncated shard, checksum mismatch, damaged manifest,
// another model's checkpoint) is one clear error, with fallback to the previous good checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <stdlib.h>

#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "cohort/checkpoint.h"
#include "support/errors.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using cohort::testing::error_of;
using cohort::testing::kind_of;
using cohort::testing::Cnn;
using cohort::testing::Mlp;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/checkpoint_test_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
};

template <typename Optimizer>
void train(Mlp& model, Optimizer& opt, int steps, int seed = 3) {
  torch::manual_seed(seed);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(torch::randn({8, 20})),
                                         torch::randint(0, 5, {8}, torch::kLong))
        .backward();
    opt.step();
  }
}

void expect_equal(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
}

// Saves `model` after 3 steps of Adam into dir as step `step`.
void save_trained(const std::string& dir, int64_t step) {
  torch::manual_seed(1);
  Mlp model;
  torch::optim::Adam opt(model->parameters(), 1e-2);
  train(model, opt, 3);
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt).set_step(step);
  cohort::save_checkpoint(dir, state);
}

std::string shard0(const std::string& step_dir) { return step_dir + "/shard-00000-of-00001.bin"; }

}  // namespace

TEST(Checkpoint, RoundTripResumesBitForBit) {
  TempDir dir;
  torch::manual_seed(1);
  Mlp model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-2).amsgrad(true));
  torch::optim::StepLR scheduler(opt, 2, 0.5);
  cohort::DistributedSampler sampler(100, cohort::SamplerOptions().num_replicas(1).rank(0));
  train(model, opt, 3);
  scheduler.step();
  scheduler.step();
  scheduler.step();
  sampler.set_epoch(4);
  int64_t samples = 48;
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt).add("scheduler", scheduler);
  state.add("sampler", sampler, samples).set_step(3).set("run", "alpha");
  torch::manual_seed(99);
  EXPECT_EQ(cohort::save_checkpoint(dir.path, state), dir.path + "/step-3");
  const torch::Tensor next_random = torch::rand({4});  // what the RNG gives after the save

  torch::manual_seed(2);  // other weights, fresh optimizer without state, other RNG
  Mlp resumed;
  torch::optim::Adam resumed_opt(resumed->parameters(), torch::optim::AdamOptions(1).amsgrad(true));
  torch::optim::StepLR resumed_scheduler(resumed_opt, 2, 0.5);
  cohort::DistributedSampler resumed_sampler(100, cohort::SamplerOptions().num_replicas(1).rank(0));
  int64_t resumed_samples = 0;
  cohort::CheckpointState loaded;
  loaded.add("model", *resumed).add("optimizer", resumed_opt).add("scheduler", resumed_scheduler);
  loaded.add("sampler", resumed_sampler, resumed_samples);
  const auto info = cohort::load_checkpoint(dir.path, loaded);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->path, dir.path + "/step-3");
  EXPECT_EQ(info->step, 3);
  EXPECT_EQ(info->world_size, 1);
  EXPECT_TRUE(info->skipped.empty());
  EXPECT_EQ(loaded.step(), 3);
  EXPECT_EQ(loaded.get("run"), "alpha");
  EXPECT_EQ(resumed_sampler.epoch(), 4);
  EXPECT_EQ(resumed_samples, 48);
  EXPECT_TRUE(torch::equal(torch::rand({4}), next_random));
  EXPECT_EQ(resumed_opt.param_groups()[0].options().get_lr(), opt.param_groups()[0].options().get_lr());
  expect_equal(*model, *resumed);
  // The same next steps give the same weights: optimizer moments, step counts and lr all came back.
  train(model, opt, 2, 7);
  train(resumed, resumed_opt, 2, 7);
  scheduler.step();
  resumed_scheduler.step();
  EXPECT_EQ(resumed_opt.param_groups()[0].options().get_lr(), opt.param_groups()[0].options().get_lr());
  expect_equal(*model, *resumed);
}

TEST(Checkpoint, OptimizersWithoutStateAndSgdMomentum) {
  TempDir dir;
  torch::manual_seed(1);
  Mlp model;
  torch::optim::SGD never_stepped(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", never_stepped);
  cohort::save_checkpoint(dir.path, state);
  torch::optim::SGD fresh(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  cohort::CheckpointState loaded;
  loaded.add("model", *model).add("optimizer", fresh);
  ASSERT_TRUE(cohort::load_checkpoint(dir.path, loaded));
  EXPECT_TRUE(fresh.state().empty());  // the momentum buffers made for loading are gone again

  torch::optim::SGD stepped(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  train(model, stepped, 2);
  cohort::CheckpointState with_state;
  with_state.add("model", *model).add("optimizer", stepped).set_step(2);
  cohort::save_checkpoint(dir.path, with_state);
  torch::manual_seed(5);
  Mlp other;
  torch::optim::SGD other_opt(other->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  cohort::CheckpointState into;
  into.add("model", *other).add("optimizer", other_opt);
  ASSERT_TRUE(cohort::load_checkpoint(dir.path, into));
  EXPECT_EQ(other_opt.state().size(), model->parameters().size());
  train(model, stepped, 1, 8);
  train(other, other_opt, 1, 8);
  expect_equal(*model, *other);
}

TEST(Checkpoint, NoCheckpointIsNothingOrAnError) {
  TempDir dir;
  Mlp model;
  cohort::CheckpointState state;
  state.add("model", *model);
  EXPECT_FALSE(cohort::load_checkpoint(dir.path + "/missing", state));
  EXPECT_FALSE(cohort::load_checkpoint(dir.path, state));  // exists, empty
  EXPECT_EQ(error_of([&] {
              cohort::load_checkpoint(dir.path + "/missing", state, cohort::LoadOptions().must_exist(true));
            }),
            "checkpoint directory " + dir.path + "/missing does not exist");
  EXPECT_EQ(error_of([&] {
              cohort::load_checkpoint(dir.path, state, cohort::LoadOptions().must_exist(true));
            }),
            "checkpoint directory " + dir.path + " holds no checkpoint (no 'latest', no step-<n>)");
}

TEST(Checkpoint, CrashedSaveLeavesPreviousCheckpoint) {
  TempDir dir;
  save_trained(dir.path, 20);
  // What a save killed half way leaves: a temporary directory with part of a shard, no manifest.
  fs::create_directory(dir.path + "/.step-30.tmp");
  std::ofstream(shard0(dir.path + "/.step-30.tmp")) << "partial";
  Mlp model;
  cohort::CheckpointState state;
  torch::optim::Adam opt(model->parameters());
  state.add("model", *model).add("optimizer", opt);
  const auto info = cohort::load_checkpoint(dir.path, state);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->step, 20);
  EXPECT_TRUE(info->skipped.empty());
  // The next save removes the leftover.
  cohort::save_checkpoint(dir.path, state.set_step(30));
  EXPECT_FALSE(fs::exists(dir.path + "/.step-30.tmp"));
  EXPECT_TRUE(fs::exists(dir.path + "/step-30/manifest.json"));
}

TEST(Checkpoint, KeepsTheNewestAndNeverRemovesLaterSteps) {
  TempDir dir;
  for (int step : {10, 20, 30, 40}) save_trained(dir.path, step);
  EXPECT_FALSE(fs::exists(dir.path + "/step-10"));
  EXPECT_TRUE(fs::exists(dir.path + "/step-20"));
  // Resumed from an older checkpoint (30 unreadable, say): 30 and 40 are someone's work, kept and named.
  ::testing::internal::CaptureStderr();
  save_trained(dir.path, 25);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(fs::exists(dir.path + "/step-30"));
  EXPECT_TRUE(fs::exists(dir.path + "/step-40"));
  EXPECT_TRUE(fs::exists(dir.path + "/step-20"));
  EXPECT_THAT(log, HasSubstr("holds later steps (step-40, step-30): they are kept, not removed; `latest` now "
                             "names step-25"));
  std::ifstream latest(dir.path + "/latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step-25");
  // The next save prunes only below: keep_last 3 of the steps up to 26 are 26, 25, 20.
  save_trained(dir.path, 26);
  EXPECT_TRUE(fs::exists(dir.path + "/step-20"));
  save_trained(dir.path, 27);
  EXPECT_FALSE(fs::exists(dir.path + "/step-20"));
  EXPECT_TRUE(fs::exists(dir.path + "/step-30") && fs::exists(dir.path + "/step-40"));
}

// Hostile pass 5, S1: an old step that could not be removed (a file held open on NFS, a directory
// without write permission; here an immutable file) failed the save that had just been committed, on
// every rank, at every save after each restart. Retention is housekeeping: a warning, and the save stands.
TEST(Checkpoint, AnOldStepThatCannotBeRemovedIsAWarningNotAFailedSave) {
  TempDir dir;
  for (int step : {10, 20, 30}) save_trained(dir.path, step);
  const std::string stuck = dir.path + "/step-10/manifest.json";
  if (std::system(("chattr +i " + stuck + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "chattr +i is not available here (not root, or a filesystem without the flag)";
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(save_trained(dir.path, 40));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::system(("chattr -i " + stuck).c_str()), 0);
  EXPECT_THAT(log, HasSubstr("checkpoint: could not remove " + dir.path +
                             "/step-10 (older than keep_last allows): Operation not permitted; the save goes on: "
                             "remove it by hand"));
  std::ifstream latest(dir.path + "/latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step-40");
  EXPECT_TRUE(fs::exists(dir.path + "/step-40/manifest.json"));
}

// Hostile pass 5, m5: a checkpoint folder replaced by a file was refused in libstdc++'s words
// ("filesystem error: cannot create directories: Not a directory [...]"); now in cohort's order.
TEST(Checkpoint, AFilesystemFailureIsSaidPathFirstInCohortsWords) {
  TempDir dir;
  std::ofstream(dir.path + "/file") << "not a folder";
  const std::string error = cohort::testing::error_of([&] { save_trained(dir.path + "/file/ck", 10); });
  EXPECT_THAT(error, HasSubstr(dir.path + "/file/ck: cannot create directories: Not a directory"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("filesystem error")));
}

TEST(Checkpoint, SavingAnExistingStepAgainSaysItReplacesIt) {
  TempDir dir;
  save_trained(dir.path, 10);
  ::testing::internal::CaptureStderr();
  save_trained(dir.path, 10);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("checkpoint " + dir.path + "/step-10 already existed: replaced by this save"));
}

TEST(Checkpoint, TruncatedShardFallsBackWithAWarning) {
  TempDir dir;
  save_trained(dir.path, 10);
  save_trained(dir.path, 20);
  const std::string shard = shard0(dir.path + "/step-20");
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 100);
  Mlp model;
  torch::optim::Adam opt(model->parameters());
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt);
  const std::string reason = "shard file " + shard + " is truncated: " + std::to_string(size - 100) +
                             " bytes, the manifest expects " + std::to_string(size);
  ::testing::internal::CaptureStderr();
  const auto info = cohort::load_checkpoint(dir.path, state);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(info->skipped, std::vector<std::string>{dir.path + "/step-20: " + reason});
  EXPECT_THAT(log, HasSubstr("warning: checkpoint " + dir.path + "/step-20 is unusable (" + reason +
                             "); falling back to " + dir.path + "/step-10"));
  // The step directory named explicitly: no fallback, the reason itself.
  EXPECT_EQ(error_of([&] { cohort::load_checkpoint(dir.path + "/step-20", state); }), reason);
  EXPECT_EQ(kind_of([&] { cohort::load_checkpoint(dir.path + "/step-20", state); }), "kind=I/O ranks=");
  EXPECT_EQ(error_of([&] {
              cohort::load_checkpoint(dir.path, state, cohort::LoadOptions().fallback(false));
            }),
            reason);
}

TEST(Checkpoint, ChecksumMismatchNamesFileAndTensor) {
  TempDir dir;
  save_trained(dir.path, 10);
  const std::string shard = shard0(dir.path + "/step-10");
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(32 + 4);  // inside the first tensor written
    file.put('\x7f');
  }
  Mlp model;
  torch::optim::Adam opt(model->parameters());
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt);
  const std::string message = error_of([&] { cohort::load_checkpoint(dir.path, state); });
  EXPECT_THAT(message, ::testing::StartsWith("checksum mismatch in " + shard + " for tensor '"));
  EXPECT_THAT(message, HasSubstr("the manifest says"));
  EXPECT_EQ(kind_of([&] { cohort::load_checkpoint(dir.path, state); }), "kind=I/O ranks=");
}

TEST(Checkpoint, DamagedManifestFallsBack) {
  TempDir dir;
  save_trained(dir.path, 10);
  save_trained(dir.path, 20);
  fs::resize_file(dir.path + "/step-20/manifest.json", 100);
  Mlp model;
  torch::optim::Adam opt(model->parameters());
  cohort::CheckpointState state;
  state.add("model", *model).add("optimizer", opt);
  const auto info = cohort::load_checkpoint(dir.path, state);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->step, 10);
  EXPECT_THAT(info->skipped.at(0),
              HasSubstr(dir.path + "/step-20/manifest.json: not valid JSON: parse error at line "));
  fs::remove(dir.path + "/step-10/manifest.json");
  EXPECT_EQ(error_of([&] { cohort::load_checkpoint(dir.path, state); }).rfind("no usable checkpoint in " + dir.path + ": ", 0), 0u);
}

TEST(Checkpoint, AnotherModelIsAnErrorWithoutFallback) {
  TempDir dir;
  save_trained(dir.path, 10);
  save_trained(dir.path, 20);
  Cnn cnn;
  torch::optim::Adam opt(cnn->parameters());
  cohort::CheckpointState state;
  state.add("model", *cnn).add("optimizer", opt);
  EXPECT_EQ(error_of([&] { cohort::load_checkpoint(dir.path, state); }),
            "checkpoint " + dir.path + "/step-20 does not match this state: it has no tensor "
            "'model/conv.weight' (saved from another model or optimizer?)");
  EXPECT_EQ(kind_of([&] { cohort::load_checkpoint(dir.path, state); }), "kind=invalid argument ranks=");
  torch::nn::Linear wider(20, 33);
  cohort::CheckpointState shapes;
  Mlp mlp;
  mlp->fc1 = mlp->replace_module("fc1", wider);
  shapes.add("model", *mlp).rng(false);
  torch::optim::Adam mlp_opt(mlp->parameters());
  shapes.add("optimizer", mlp_opt);
  EXPECT_EQ(error_of([&] { cohort::load_checkpoint(dir.path, shapes); }),
            "checkpoint " + dir.path + "/step-20 does not match this state: tensor 'model/fc1.weight' "
            "has shape [32, 20] in the checkpoint, [33, 20] here");
  cohort::CheckpointState missing;
  missing.add("model", *mlp);
  EXPECT_EQ(error_of([&] { cohort::load_checkpoint(dir.path, missing); }),
            "checkpoint " + dir.path + "/step-20 does not match this state: it holds 'optimizer', "
            "which this state does not add");
}

TEST(Checkpoint, StateNamesAreChecked) {
  Mlp model;
  cohort::CheckpointState state;
  state.add("model", *model);
  EXPECT_EQ(error_of([&] { state.add("model", *model); }), "CheckpointState::add: the name 'model' is used twice");
  EXPECT_EQ(error_of([&] { state.add("a/b", *model); }),
            "CheckpointState::add: the name 'a/b' is empty, contains '/' or is the reserved name 'rng'");
}

// Found by fuzz/shard_fuzz: a shard whose header was refused left its file descriptor open (a
// constructor that throws runs no destructor), so a resume falling back past damaged checkpoints
// leaked one descriptor per shard until open() failed; and an offset near INT64_MAX overflowed the
// bounds check.
namespace {
// A shard of rank 0 of 1 holding four floats (a 16-byte payload); returns its path.
std::string write_16_byte_shard(const std::string& dir) {
  const std::string path = dir + "/shard-00000-of-00001.bin";
  cohort::detail::ckpt::ShardWriter writer(path, 0, 1);
  writer.append(torch::arange(4, torch::kFloat));
  writer.finish();
  return path;
}

int open_descriptors() {
  return static_cast<int>(std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()));
}
}  // namespace

TEST(ShardReader, RefusedHeaderClosesItsFile) {
  TempDir dir;
  const std::string path = write_16_byte_shard(dir.path);
  const int before = open_descriptors();
  for (int i = 0; i < 50; ++i) {
    EXPECT_THAT(error_of([&] { cohort::detail::ckpt::ShardReader reader(path, 1, 2, 16); }),
                HasSubstr("does not match the manifest (damaged, or another checkpoint's)"));
  }
  EXPECT_EQ(open_descriptors(), before);
}

// Hostile pass 6: the header's format version was never read, so a shard of another format would be
// read as this one.
TEST(ShardReader, AnotherFormatVersionIsRefused) {
  TempDir dir;
  const std::string path = write_16_byte_shard(dir.path);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const uint32_t version = 7;
    file.seekp(8);  // after the 8-byte magic number
    file.write(reinterpret_cast<const char*>(&version), sizeof version);
  }
  EXPECT_EQ(error_of([&] { cohort::detail::ckpt::ShardReader reader(path, 0, 1, 16); }),
            "shard file " + path + " is of shard format version 7; this cohort reads version 1 (a newer cohort wrote it?)");
}

TEST(ShardReader, OffsetNearInt64MaxIsOutside) {
  TempDir dir;
  const std::string path = write_16_byte_shard(dir.path);
  cohort::detail::ckpt::ShardReader reader(path, 0, 1, 16);
  char out[100];
  EXPECT_EQ(error_of([&] { reader.read_bytes(INT64_MAX - 10, 100, out); }),
            "shard file " + path + ": 100 bytes at byte 9223372036854775797 lie outside its 16-byte payload");
}

// Found by fuzz/manifest_fuzz: a 'format' or 'library_version' of another type than string escaped
// read_manifest as nlohmann's type_error instead of the manifest's own message.
TEST(Manifest, FieldsOfAnotherTypeAreRefusedByName) {
  TempDir dir;
  const std::string path = dir.path + "/manifest.json";
  const auto read_text = [&](const std::string& text) {
    std::ofstream(path) << text;
    return error_of([&] { cohort::detail::ckpt::read_manifest(path); });
  };
  EXPECT_EQ(read_text(R"({"format": 7})"),
            path + " is not a cohort checkpoint manifest ('format' is not \"cohort-checkpoint\")");
  EXPECT_EQ(read_text(R"({"format": "cohort-checkpoint", "format_version": 99, "library_version": [1]})"),
            path + " has format version 99; this cohort reads up to 5 (written by cohort ?)");
  // A float where an integer belongs was converted with undefined behaviour (7e36 to int).
  EXPECT_EQ(read_text(R"({"format": "cohort-checkpoint", "format_version": 7e36})"),
            path + ": 'format_version' is not an integer of its range (7e+36)");
  EXPECT_EQ(read_text(R"({"format": "cohort-checkpoint", "format_version": 4294967296})"),
            path + ": 'format_version' is not an integer of its range (4294967296)");
}

// Issue 39: a manifest that is not JSON showed nlohmann's own text ("[json.exception.parse_error.101]
// ..."); one nested 100,000 deep was built whole. Both are now I/O errors in cohort's words.
TEST(Manifest, DamagedJsonIsAnIOErrorInCohortsWords) {
  TempDir dir;
  const std::string path = dir.path + "/manifest.json";
  const auto read_text = [&](const std::string& text) {
    std::ofstream(path) << text;
    return error_of([&] { cohort::detail::ckpt::read_manifest(path); });
  };
  EXPECT_EQ(read_text(R"({"format": "cohort-checkpoint", )"),
            path + ": not valid JSON: parse error at line 1, column 33: syntax error while parsing object key - "
                   "unexpected end of input; expected string literal");
  EXPECT_EQ(read_text(std::string(100000, '[') + std::string(100000, ']')),
            path + ": objects and arrays nested more than 64 levels deep: no cohort checkpoint manifest nests so deep");
  EXPECT_EQ(kind_of([&] { cohort::detail::ckpt::read_manifest(path); }), "kind=I/O ranks=");
  EXPECT_EQ(read_text(R"({"format": "cohort-checkpoint", "format": "cohort-checkpoint"})"),
            path + ": duplicate key format");
}

}  // namespace checkpoint_test
