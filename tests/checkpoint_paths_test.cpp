// Checkpoint paths confined to the checkpoint (issue 28): a `latest` or a manifest file name leading
// out of the checkpoint directory is refused before anything it names is read (resume, cohort-ckpt
// info/verify/consolidate; verify says BAD); consolidate refuses an output inside any checkpoint of
// the directory; hostile shapes and names are BAD instead of a safetensors file Python rejects; what an
// error quotes is bounded; a failed consolidate leaves no temporary and planted links are not followed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoint/dir_lock.h"
#include "cohort/checkpoint.h"
#include "support/manifest_seal.h"
#include "support/errors.h"
#include "support/multiproc.h"
#include "support/small_models.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace checkpoint_paths_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using cohort::testing::ToolRun;

namespace {

ToolRun tool(const std::string& args) { return cohort::testing::run_tool("tools/cohort_ckpt/cohort-ckpt", args); }

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A temporary directory holding a checkpoint directory `ckpt` with the given steps (a world of one).
struct Fixture {
  explicit Fixture(std::vector<int64_t> steps = {10}) {
    char name[] = "/tmp/checkpoint_paths_XXXXXX";
    dir = ::mkdtemp(name);
    root = dir + "/ckpt";
    torch::manual_seed(1);
    for (int64_t step : steps) {
      cohort::CheckpointState state;
      state.add("model", *model).set_step(step);
      cohort::save_checkpoint(root, state);
    }
  }
  ~Fixture() { fs::remove_all(dir); }
  std::string load_error() {
    cohort::CheckpointState state;
    state.add("model", *model);
    return cohort::testing::error_of([&] { cohort::load_checkpoint(root, state); });
  }
  void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::trunc) << text; }
  std::string dir, root;
  cohort::testing::Mlp model;
};

}  // namespace

TEST(CheckpointPaths, LatestLeadingOutIsRefusedAndNothingItNamesIsRead) {
  Fixture f;
  fs::create_directories(f.dir + "/outside");
  fs::copy(f.root + "/step-10", f.dir + "/outside/step-7", fs::copy_options::recursive);  // a sound checkpoint
  for (const std::string& latest : {std::string("../outside/step-7"), f.dir + "/outside/step-7"}) {
    f.write(f.root + "/latest", latest + "\n");
    const std::string message = f.root + "/latest names '" + latest + "', not a step-<n> directory of " + f.root +
                                ": the pointer must name one of the checkpoint's own step directories; nothing was read";
    EXPECT_THAT(f.load_error(), HasSubstr(message));
    const ToolRun info = tool("info " + f.root);
    EXPECT_EQ(info.code, 1);
    EXPECT_EQ(info.out, "cohort-ckpt: error: " + message + "\n");
    if (latest[0] == '/') continue;  // the tools read `latest` alike whatever it holds: once is enough
    const ToolRun verify = tool("verify " + f.root);
    EXPECT_EQ(verify.code, 1);
    EXPECT_THAT(verify.out, HasSubstr("cohort-ckpt: " + message + "\n"));
    EXPECT_THAT(verify.out, HasSubstr(f.root + ": BAD (1 problem(s))\n"));
    EXPECT_EQ(tool("consolidate " + f.root + " -o " + f.dir + "/out.st").code, 1);
    EXPECT_FALSE(fs::exists(f.dir + "/out.st"));
  }
  // A step directory that is a link out of the checkpoint: named by `latest`, refused; found by listing
  // (no `latest`), left out.
  fs::create_directory_symlink(f.dir + "/outside/step-7", f.root + "/step-99");
  f.write(f.root + "/latest", "step-99\n");
  EXPECT_EQ(tool("info " + f.root).out, "cohort-ckpt: error: " + f.root + "/latest names step-99, a link that leads out of " +
                                            f.root + ": a checkpoint's step directories are its own; nothing was read\n");
  fs::remove(f.root + "/latest");
  EXPECT_THAT(tool("info " + f.root).out, HasSubstr("checkpoint " + f.root + "/step-10\n"));
  // `latest` itself a link (to a file saying step-10): cohort reads its own pointer only.
  f.write(f.dir + "/pointer", "step-10\n");
  fs::create_symlink(f.dir + "/pointer", f.root + "/latest");
  EXPECT_THAT(f.load_error(), HasSubstr("the checkpoint pointer " + f.root + "/latest is a symbolic link: cohort reads "
                                        "its own files only, never through a link"));
}

// `../../../../../etc/passwd` as a file name: refused by name, so the error cannot leak the file's size.
TEST(CheckpointPaths, ManifestFileNamesLeadingOutAreRefusedUnread) {
  Fixture f;
  const std::string step = f.root + "/step-10", manifest = step + "/manifest.json";
  const std::string original = contents(manifest);
  auto j = nlohmann::json::parse(original);
  j["files"][0]["name"] = "../../../../../etc/passwd";
  for (auto& tensor : j["tensors"])
    for (auto& piece : tensor["pieces"]) piece["file"] = "../../../../../etc/passwd";
  f.write(manifest, j.dump());
  const std::string message = manifest + ": file name '../../../../../etc/passwd' is not a plain name inside the step "
                                         "directory (a checkpoint's files are its own); nothing was read";
  const ToolRun verify = tool("verify " + f.root);
  EXPECT_EQ(verify.code, 1);
  EXPECT_EQ(verify.out, "cohort-ckpt: " + message + "\n" + step + ": BAD (1 problem(s))\n");
  const ToolRun consolidate = tool("consolidate " + f.root + " -o " + f.dir + "/out.st");
  EXPECT_EQ(consolidate.code, 1);
  EXPECT_EQ(consolidate.out, "cohort-ckpt: error: " + message + "\n");
  EXPECT_FALSE(fs::exists(f.dir + "/out.st"));
  EXPECT_THAT(f.load_error(), HasSubstr(message));

  // A shard replaced by a link to a sound copy outside: not read through.
  f.write(manifest, original);
  const std::string shard = step + "/shard-00000-of-00001.bin";
  fs::copy_file(shard, f.dir + "/copy.bin");
  fs::remove(shard);
  fs::create_symlink(f.dir + "/copy.bin", shard);
  const ToolRun linked = tool("verify " + f.root);
  EXPECT_EQ(linked.code, 1);
  EXPECT_THAT(linked.out, HasSubstr("shard file " + shard + " is a symbolic link: cohort reads its own files only, "
                                    "never through a link"));
}

// Issue 28: `consolidate CKPT -o <a shard of a sibling checkpoint>` overwrote that shard.
TEST(CheckpointPaths, ConsolidateRefusesAnOutputInsideAnyCheckpointOfTheDirectory) {
  Fixture f({10, 20});
  const std::string shard = f.root + "/step-10/shard-00000-of-00001.bin";
  const std::string before = contents(shard);
  const ToolRun sibling = tool("consolidate " + f.root + " -o " + shard);
  EXPECT_EQ(sibling.code, 2);
  EXPECT_EQ(sibling.out, "cohort-ckpt: error: the output " + shard + " is inside checkpoint " + f.root + "/step-10 of " +
                             f.root + ": writing it there would replace or add to that checkpoint's files; write it "
                             "elsewhere\n");
  EXPECT_EQ(contents(shard), before);
  fs::create_directory_symlink(f.root + "/step-10", f.dir + "/link");
  EXPECT_EQ(tool("consolidate " + f.root + " -o " + f.dir + "/link/new.st").code, 2) << "resolved through the link";
  EXPECT_THAT(tool("consolidate " + f.root + " -o " + f.root + "/.step-30.tmp/x.st").out,
              HasSubstr("is inside checkpoint " + f.root + "/.step-30.tmp of " + f.root));
  EXPECT_EQ(tool("consolidate " + f.root + " -o " + f.root + "/model.safetensors").code, 0) << "beside them is fine";
}

// Issue 28: these wrote safetensors files Python's safetensors rejects while verify said OK.
TEST(CheckpointPaths, HostileShapesAndNamesAreBadAndNeverConsolidated) {
  Fixture f;
  const std::string step = f.root + "/step-10", manifest = step + "/manifest.json";
  const std::string original = contents(manifest);
  const std::string where = manifest + ": tensor 'model/fc1.weight'";
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& t) { t["shape"] = {-32, 20}; }, where + ": shape [-32, 20] has a negative dimension"},
      {[](nlohmann::json& t) { t["shape"] = {int64_t(1) << 62, 20}; },
       where + ": shape [4611686018427387904, 20] holds more bytes than a 64-bit size counts"},
      {[](nlohmann::json& t) { t["shape"] = {32, 21}; }, where + ": shape [32, 21] is 2688 bytes, its pieces hold 2560"},
      // Hostile pass 12, M-1: verified and consolidated while the load failed in c10's words.
      {[](nlohmann::json& t) {
         auto second = t["pieces"][0];
         const int64_t half = t["pieces"][0]["numel"].get<int64_t>() / 2;
         t["pieces"][0]["numel"] = half;
         t["pieces"][0]["nbytes"] = 4 * half;
         second["offset"] = half;
         second["numel"] = half;
         second["nbytes"] = 4 * half;
         second["byte_offset"] = second["byte_offset"].get<int64_t>() + 4 * half;
         t["pieces"].push_back(second);
       },
       where + ": a replicated tensor is written whole, in one piece; it has 2"},
      // Hostile pass 12, m-3: a piece lies in its writer's shard.
      {[](nlohmann::json& t) { t["pieces"][0]["rank"] = 1; },
       where + ": a piece of rank 1 lies in file 'shard-00000-of-00001.bin', rank 0's"},
      {[](nlohmann::json&) {}, where + " is listed twice"},  // the record appended once more
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto j = nlohmann::json::parse(original);
    for (auto& t : j["tensors"]) {
      if (t["name"] != "model/fc1.weight") continue;
      cases[i].first(t);
      if (i + 1 == cases.size()) j["tensors"].push_back(t);
      break;
    }
    cohort::testing::reseal_manifest(j);  // the checks behind the records' checksum
    f.write(manifest, j.dump());
    const ToolRun verify = tool("verify " + step);
    EXPECT_EQ(verify.code, 1) << cases[i].second;
    EXPECT_EQ(verify.out, "cohort-ckpt: " + cases[i].second + "\n" + step + ": BAD (1 problem(s))\n");
    if (i != 0 && i + 1 != cases.size()) continue;  // consolidate reads the manifest as verify does
    const ToolRun consolidate = tool("consolidate " + step + " -o " + f.dir + "/out.st");
    EXPECT_EQ(consolidate.code, 1);
    EXPECT_EQ(consolidate.out, "cohort-ckpt: error: " + cases[i].second + "\n");
    EXPECT_FALSE(fs::exists(f.dir + "/out.st"));
  }
}

TEST(CheckpointPaths, ErrorsQuoteBoundedTextAndNameTheInput) {
  Fixture f;
  f.write(f.root + "/latest", std::string(5000000, 'x'));  // issue 28: verify printed 10 MB
  const ToolRun huge = tool("verify " + f.root);
  EXPECT_EQ(huge.code, 1);
  EXPECT_EQ(huge.out, "cohort-ckpt: the checkpoint pointer " + f.root + "/latest has 5000000 bytes, more than the 4096 "
                      "it may hold\n" + f.root + ": BAD (1 problem(s))\n");
  f.write(f.root + "/latest", std::string(3000, 'y'));
  EXPECT_EQ(tool("info " + f.root).out, "cohort-ckpt: error: " + f.root + "/latest names '" + std::string(200, 'y') +
                                            "... (3000 bytes)', not a step-<n> directory of " + f.root +
                                            ": the pointer must name one of the checkpoint's own step directories; "
                                            "nothing was read\n");
  // Hostile pass 8: a manifest.json given was read as the directory holding another.
  f.write(f.root + "/latest", "step-10");
  const ToolRun manifest = tool("verify " + f.root + "/step-10/manifest.json");
  EXPECT_EQ(manifest.code, 0) << manifest.out;
  EXPECT_THAT(manifest.out, HasSubstr(f.root + "/step-10: OK"));
  const ToolRun empty = tool("verify ''");
  EXPECT_EQ(empty.code, 2);
  EXPECT_EQ(empty.out, "cohort-ckpt: error: the checkpoint path is empty: give a checkpoint directory or one of its "
                       "step-<n> directories\n");
  fs::create_symlink(f.dir + "/loop", f.dir + "/loop");  // issue 28: the filesystem library's text
  const ToolRun loop = tool("verify " + f.dir + "/loop");
  EXPECT_EQ(loop.code, 2);
  EXPECT_EQ(loop.out, "cohort-ckpt: error: checkpoint path " + f.dir + "/loop cannot be read: Too many levels of "
                      "symbolic links\n");
}

// A consolidation that fails halfway (RLIMIT_FSIZE standing in for a full disk) leaves no temporary;
// links planted at the old `<output>.tmp` and `latest.tmp` names, or at the output, are never followed.
TEST(CheckpointPaths, FailedWritesLeaveNoTemporaryAndPlantedLinksAreNotFollowed) {
  Fixture f;
  const std::string out = f.dir + "/out", victim = out + "/victim";
  fs::create_directory(out);
  f.write(victim, "precious");
  fs::create_symlink(victim, out + "/model.st.tmp");
  fs::create_symlink(victim, f.root + "/latest.tmp");
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous = ::signal(SIGXFSZ, SIG_IGN);  // inherited: the tool's write fails with EFBIG
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const ToolRun full = tool("consolidate " + f.root + " -o " + out + "/model.st");
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous);
  EXPECT_EQ(full.code, 1);
  EXPECT_EQ(full.out, "cohort-ckpt: error: cannot write " + out + "/model.st: File too large\n");
  std::set<std::string> names;
  for (const auto& item : fs::directory_iterator(out)) names.insert(item.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"model.st.tmp", "victim"}));

  EXPECT_EQ(tool("consolidate " + f.root + " -o " + out + "/model.st").code, 0);
  cohort::CheckpointState state;
  state.add("model", *f.model).set_step(20);
  cohort::save_checkpoint(f.root, state);
  EXPECT_EQ(contents(f.root + "/latest"), "step-20\n");
  EXPECT_EQ(contents(victim), "precious");
  fs::create_symlink(victim, out + "/linked.st");
  EXPECT_EQ(tool("consolidate " + f.root + " -o " + out + "/linked.st").out,
            "cohort-ckpt: error: " + out + "/linked.st is a symbolic link: cohort does not write through links "
            "(remove it, or name the file itself)\n");
  EXPECT_EQ(contents(victim), "precious");
}

// Issue 39: a full disk while rank 0 writes the manifest (RLIMIT_FSIZE: the shard fits, the manifest
// with a large user value does not) removes the whole temporary directory, shards included, and
// `latest` stays on the previous checkpoint, which loads.
TEST(CheckpointPaths, AFullDiskDuringTheManifestLeavesNoTemporary) {
  Fixture f;
  const int64_t shard_bytes = static_cast<int64_t>(fs::file_size(f.root + "/step-10/" +
                                                                  fs::directory_iterator(f.root + "/step-10")->path().filename().string()));
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_LT(shard_bytes, static_cast<int64_t>(small.rlim_cur));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  cohort::CheckpointState state;
  state.add("model", *f.model).set_step(20).set("notes", std::string(200 * 1024, 'n'));
  const std::string error = cohort::testing::error_of([&] { cohort::save_checkpoint(f.root, state); });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous);
  EXPECT_THAT(error, HasSubstr("manifest.json"));
  EXPECT_THAT(error, HasSubstr("File too large"));
  std::set<std::string> names;
  for (const auto& item : fs::directory_iterator(f.root)) names.insert(item.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{".lock", "latest", "step-10"}));
  EXPECT_EQ(contents(f.root + "/latest"), "step-10\n");
  cohort::CheckpointState loaded;
  loaded.add("model", *f.model);
  const auto info = cohort::load_checkpoint(f.root, loaded);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step, 10);
  EXPECT_TRUE(info->skipped.empty());
}

// Issue 39: two jobs on one checkpoint directory. The lock is this process's once it saved there; a
// second process is refused naming this host and pid, and takes the lock once the holder is gone
// (the kernel releases it on SIGKILL).
TEST(CheckpointPaths, ASecondJobOnTheDirectoryIsRefusedNamingTheHolder) {
  Fixture f;  // saved step 10 here: this process holds f.root's lock
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto lock_error = [](const std::string& dir) -> std::string {  // "" when the lock is taken
    try {
      cohort::detail::ckpt::hold_directory_lock(dir);
      return "";
    } catch (const cohort::Error& error) {
      return error.what();
    }
  };
  // In a child process: lock_error(dir) ("locked" when it got the lock); `wait_for_kill` keeps it.
  auto in_child = [&](const std::string& dir, bool wait_for_kill) {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(out[0]);
      const std::string error = lock_error(dir);
      const std::string line = (error.empty() ? "locked" : error) + "\n";
      (void)!::write(out[1], line.data(), line.size());
      while (wait_for_kill) ::pause();
      ::_exit(0);
    }
    ::close(out[1]);
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(out[0]);
    return std::make_pair(child, line);
  };
  auto [first, refused] = in_child(f.root, false);
  ::waitpid(first, nullptr, 0);
  EXPECT_EQ(refused, "checkpoint directory " + f.root + " is in use by another job (host " + host + ", pid " +
                         std::to_string(::getpid()) + " holds " + f.root +
                         "/.lock): give this job a directory of its own, or stop the other one");
  const std::string other = f.dir + "/other";
  fs::create_directory(other);
  auto [holder, locked] = in_child(other, true);
  EXPECT_EQ(locked, "locked");
  EXPECT_THAT(lock_error(other), HasSubstr("pid " + std::to_string(holder) + " holds"));
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_EQ(lock_error(other), "");
}


// Hostile pass 19, S-1: the candidates went from rank 0 to the others as one path a line, so a
// directory named "ckpt/step-10\nz.ck" loaded ckpt/step-10, another run's checkpoint outside it, and
// one named "nl\nx.ck" never resumed at all.
TEST(CheckpointPaths, ADirectoryNameWithANewlineLoadsItsOwnNewestCheckpoint) {
  Fixture other;  // other.root/step-10: another run's
  const std::string own = other.root + "/step-10\nz.ck";
  for (int64_t step : {5, 6}) {
    cohort::CheckpointState state;
    state.add("model", *other.model).set_step(step);
    cohort::save_checkpoint(own, state);
  }
  cohort::CheckpointState state;
  state.add("model", *other.model);
  const auto info = cohort::load_checkpoint(own, state);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->path, own + "/step-6");
  EXPECT_EQ(state.step(), 6);
}

}  // namespace checkpoint_paths_test
