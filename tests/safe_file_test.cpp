// The safe-write helper every file cohort writes goes through (src/core/safe_file.h, issue 28): a
// regular file is replaced whole; a device, a directory, a fifo or a symbolic link at the target is
// refused with one line and left as it was; links planted under the old `<target>.tmp` name are never
// followed; a failed write (RLIMIT_FSIZE standing in for a full disk) leaves no temporary and the old
// file intact. Own-file reads refuse links and fifos without blocking, and are bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/safe_file.h"
#include "core/text.h"
#include "support/errors.h"

// Tests compile in unity batches of several files: this file's names stay in its own namespace.
namespace safe_file_test {

namespace fs = std::filesystem;
using cohort::testing::error_of;

namespace {

struct TempDir {
  TempDir() {
    char name[] = "/tmp/safe_file_test_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& item : fs::directory_iterator(path)) out.insert(item.path().filename().string());
    return out;
  }
  std::string path;
};

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST(SafeFile, ReplacesARegularFileWholeAndLeavesNothingElse) {
  TempDir dir;
  const std::string target = dir.path + "/out.json";
  cohort::detail::write_file_safely(target, "first");
  cohort::detail::write_file_safely(target, "second, longer");
  EXPECT_EQ(contents(target), "second, longer");
  EXPECT_EQ(dir.names(), std::set<std::string>{"out.json"});
  EXPECT_EQ(fs::status(target).permissions() & fs::perms::owner_write, fs::perms::owner_write);
}

TEST(SafeFile, RefusesDevicesDirectoriesAndFifosLeavingThemAsTheyWere) {
  EXPECT_EQ(error_of([] { cohort::detail::write_file_safely("/dev/null", "x"); }),
            "/dev/null is a character device, not a regular file: cohort writes regular files only");
  struct stat info {};
  ASSERT_EQ(::stat("/dev/null", &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode)) << "/dev/null is no longer a character device";
  TempDir dir;
  fs::create_directory(dir.path + "/sub");
  EXPECT_EQ(error_of([&] { cohort::detail::write_file_safely(dir.path + "/sub", "x"); }),
            dir.path + "/sub is a directory, not a regular file: cohort writes regular files only");
  ASSERT_EQ(::mkfifo((dir.path + "/pipe").c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { cohort::detail::write_file_safely(dir.path + "/pipe", "x"); }),
            dir.path + "/pipe is a fifo, not a regular file: cohort writes regular files only");
  EXPECT_TRUE(fs::is_directory(dir.path + "/sub"));
  EXPECT_TRUE(fs::is_fifo(dir.path + "/pipe"));
  EXPECT_EQ(dir.names(), (std::set<std::string>{"pipe", "sub"})) << "a refused write leaves no temporary";
  EXPECT_EQ(error_of([&] { cohort::detail::write_file_safely(dir.path + "/nowhere/out", "x"); }),
            "cannot create a temporary file in " + dir.path + "/nowhere to write " + dir.path +
                "/nowhere/out: No such file or directory");
}

// A link at the target would have the rename replace the link (not follow it), but the user meant
// the file behind it: refused, naming the link; the file behind it is unchanged.
TEST(SafeFile, NeverWritesThroughASymbolicLinkAtTheTarget) {
  TempDir dir;
  const std::string victim = dir.path + "/victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir.path + "/trace.json");
  EXPECT_EQ(error_of([&] { cohort::detail::write_file_safely(dir.path + "/trace.json", "x"); }),
            dir.path + "/trace.json is a symbolic link: cohort does not write through links (remove it, or name "
                       "the file itself)");
  EXPECT_EQ(contents(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(dir.path + "/trace.json"));
}

// Issue 28: a link planted at `<target>.tmp` (the name cohort used to write first) made cohort
// overwrite the link's target. Temporaries now have random names, created O_EXCL|O_NOFOLLOW.
TEST(SafeFile, LinksPlantedAtTheOldTemporaryNameAreNeverFollowed) {
  TempDir dir;
  const std::string victim = dir.path + "/victim";
  std::ofstream(victim) << "precious";
  for (const char* name : {"/latest.tmp", "/out.st.tmp", "/trace.json.tmp"}) fs::create_symlink(victim, dir.path + name);
  for (const char* name : {"/latest", "/out.st", "/trace.json"}) {
    cohort::detail::write_file_safely(dir.path + name, "new");
    EXPECT_EQ(contents(dir.path + name), "new");
  }
  EXPECT_EQ(contents(victim), "precious");
  EXPECT_EQ(dir.names(), (std::set<std::string>{"latest", "latest.tmp", "out.st", "out.st.tmp", "trace.json",
                                                "trace.json.tmp", "victim"}));
}

// A full disk, simulated with RLIMIT_FSIZE (root ignores permissions, not this limit): the write
// fails with one line naming the target, the old contents stay, and no temporary is left behind.
TEST(SafeFile, AFailedWriteLeavesNoTemporaryAndTheOldFile) {
  TempDir dir;
  const std::string target = dir.path + "/metrics.csv";
  cohort::detail::write_file_safely(target, "old");
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous = ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of a signal
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = error_of([&] { cohort::detail::write_file_safely(target, std::string(1 << 20, 'x')); });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous);
  EXPECT_EQ(message, "cannot write " + target + ": File too large");
  EXPECT_EQ(contents(target), "old");
  EXPECT_EQ(dir.names(), std::set<std::string>{"metrics.csv"});
}

// An exception between creating and committing (a failed checksum while consolidating) removes it.
TEST(SafeFile, AnUncommittedFileIsRemovedWhenDestroyed) {
  TempDir dir;
  {
    cohort::detail::SafeFile file(dir.path + "/model.safetensors");
    file.write("partial");
    EXPECT_EQ(dir.names().size(), 1u);
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(SafeFile, OwnFileReadsRefuseLinksAndFifosAndAreBounded) {
  TempDir dir;
  std::ofstream(dir.path + "/real") << "step-3\n";
  fs::create_symlink(dir.path + "/real", dir.path + "/link");
  ASSERT_EQ(::mkfifo((dir.path + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(cohort::detail::read_own_file(dir.path + "/real", "manifest", 100), "step-3\n");
  EXPECT_EQ(error_of([&] { cohort::detail::read_own_file(dir.path + "/link", "manifest", 100); }),
            "manifest " + dir.path + "/link is a symbolic link: cohort reads its own files only, never through a link");
  EXPECT_EQ(error_of([&] { cohort::detail::read_own_file(dir.path + "/fifo", "shard file", 100); }),
            "shard file " + dir.path + "/fifo is a fifo, not a regular file");
  EXPECT_EQ(error_of([&] { cohort::detail::read_own_file("/dev/zero", "manifest", 100); }),
            "manifest /dev/zero is a character device, not a regular file");
  EXPECT_EQ(error_of([&] { cohort::detail::read_own_file(dir.path + "/real", "manifest", 3); }),
            "manifest " + dir.path + "/real has 7 bytes, more than the 3 it may hold");
}

TEST(SafeFile, ExcerptBoundsWhatAMessageQuotes) {
  EXPECT_EQ(cohort::detail::excerpt("step-7"), "step-7");
  EXPECT_EQ(cohort::detail::excerpt("a\nb"), "a\\x0ab");
  const std::string huge(5000000, 'x');
  EXPECT_EQ(cohort::detail::excerpt(huge), std::string(200, 'x') + "... (5000000 bytes)");
}

}  // namespace safe_file_test
