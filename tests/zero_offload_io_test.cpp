// ZeRO-Infinity's swap files and their asynchronous I/O (src/zero/offload/): bytes written in blocks
// come back equal whatever the block size and queue depth; a file shortened or removed under the job,
// a directory that cannot take it and a disk too small are each one Error of its kind naming the path
// and the rank; the files go when the job ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "zero/offload/aligned_buffer.h"
#include "zero/offload/async_io.h"
#include "zero/offload/swap_file.h"

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

namespace cohort::detail {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cohort-offload-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

std::string message_of(const std::function<void()>& fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

void fill_random(AlignedBuffer& buffer, uint32_t seed) {
  std::mt19937 random(seed);
  auto* bytes = static_cast<uint32_t*>(buffer.data());
  for (int64_t i = 0; i < buffer.bytes() / 4; ++i) bytes[i] = random();
}

TEST(OffloadIo, BytesWrittenInBlocksComeBackEqual) {
  TempDir dir;
  const int64_t bytes = 5 * (1 << 20) + 3 * 4096;  // not a whole number of blocks
  for (const AioOptions& options :
       {AioOptions{1 << 20, 8, false, true}, AioOptions{4096, 1, true, false}, AioOptions{1 << 16, 32, false, true}}) {
    SwapFile file(dir.path, "offload_optimizer.nvme_path", "optimizer", 3, 2 * bytes);
    AsyncIo io(options);
    AlignedBuffer out(bytes), back(bytes);
    fill_random(out, 7);
    io.wait(io.write(file, bytes, out.data(), bytes));  // the second half of the file
    const auto ticket = io.read(file, bytes, back.data(), bytes);
    EXPECT_LE(io.in_flight(), options.queue_depth);
    io.wait(ticket);
    EXPECT_EQ(std::memcmp(out.data(), back.data(), size_t(bytes)), 0) << "block " << options.block_size;
    EXPECT_EQ(io.in_flight(), 0);
  }
}

TEST(OffloadIo, TheFileIsNewOwnedAndNeverSeenInTheDirectory) {
  TempDir dir;
  SwapFile file(dir.path, "offload_param.nvme_path", "param", 1, 10000);
  EXPECT_THAT(file.path(), MatchesRegex(".*/cohort-param-rank1-[0-9]+-[0-9]+\\.swap"));
  EXPECT_EQ(file.bytes(), 12288);  // rounded up to the direct-I/O alignment
  struct stat info {};
  ASSERT_EQ(::fstat(file.fd(), &info), 0);
  EXPECT_EQ(info.st_size, 12288);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(info.st_nlink, 0u);  // unlinked as soon as it was open
  EXPECT_TRUE(fs::is_empty(dir.path));
}

// However the process ends, no swap file is left (hostile pass 3, D2: every interrupted run left one
// as large as its rank's offloaded state, named by a pid nothing would reuse).
TEST(OffloadIo, AProcessKilledWithItsSwapFileLeavesNothing) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SwapFile file(dir.path, "offload_optimizer.nvme_path", "optimizer", 0, 1 << 20);
    (void)!::write(ready[1], "x", 1);
    ::pause();  // killed here, its SwapFile never destroyed
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(OffloadIo, AShortenedFileIsAnIoErrorNamingItAndTheRank) {
  TempDir dir;
  SwapFile file(dir.path, "offload_optimizer.nvme_path", "optimizer", 2, 8192);
  AsyncIo io(AioOptions{});
  AlignedBuffer buffer(8192);
  ASSERT_EQ(::ftruncate(file.fd(), 4096), 0);
  EXPECT_EQ(message_of([&] { file.check_intact(); }, ErrorKind::kIO),
            "the swap file " + file.path() + " (rank 2) was cut to 4096 bytes while the job ran (it had 8192)");
  EXPECT_THAT(message_of([&] { io.wait(io.read(file, 0, buffer.data(), 8192)); }, ErrorKind::kIO),
              HasSubstr("reading 4096 bytes at offset 4096 of the swap file " + file.path() +
                        " (rank 2) failed: the file ended early (it was shortened while the job ran)"));
}

TEST(OffloadIo, ADirectoryThatCannotTakeTheFileIsRefusedNamingTheKey) {
  TempDir dir;
  const std::string key = "offload_optimizer.nvme_path";
  EXPECT_EQ(message_of([&] { SwapFile(dir.path + "/absent", key, "optimizer", 0, 4096); }, ErrorKind::kInvalidArgument),
            key + " \"" + dir.path + "/absent\" does not exist (rank 0): No such file or directory");
  std::ofstream(dir.path + "/file") << "x";
  EXPECT_EQ(message_of([&] { SwapFile(dir.path + "/file", key, "optimizer", 1, 4096); }, ErrorKind::kInvalidArgument),
            key + " \"" + dir.path + "/file\" is not a directory (rank 1)");
  EXPECT_EQ(message_of([&] { SwapFile("", key, "optimizer", 0, 4096); }, ErrorKind::kInvalidArgument),
            key + " is empty: give a directory on a local disk (rank 0)");
}

TEST(OffloadIo, ADiskTooSmallIsNamedAtTheStartAndLeavesNoFile) {
  TempDir dir;
  if (::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root): " << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{dir.path};
  const std::string message = message_of([&] { SwapFile(dir.path, "offload_param.nvme_path", "param", 0, 4 << 20); },
                                         ErrorKind::kIO);
  EXPECT_THAT(message, MatchesRegex(".*could not reserve 4194304 bytes for the swap file " + dir.path +
                                    "/cohort-param-rank0-[0-9]+-[0-9]+\\.swap under offload_param.nvme_path \\(rank "
                                    "0\\): No space left on device"));
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(OffloadIo, BadAioOptionsAreRefused) {
  EXPECT_EQ(message_of(
                [] {
                  AsyncIo(AioOptions{1000, 8, false, true});
                },
                ErrorKind::kInvalidArgument),
            "aio.block_size: must be a positive multiple of 4096 bytes, got 1000");
  EXPECT_EQ(message_of(
                [] {
                  AsyncIo(AioOptions{4096, 0, false, true});
                },
                ErrorKind::kInvalidArgument),
            "aio.queue_depth: must be from 1 to 4096, got 0");
}

}  // namespace
}  // namespace cohort::detail
