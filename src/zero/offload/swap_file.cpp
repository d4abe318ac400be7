// SwapFile (see swap_file.h). The name carries the rank and the pid, and O_EXCL makes a name that
// exists already (another job's, a link planted in the directory) a retry under the next number,
// never a file opened twice. The name is unlinked at once: the file lives as long as its descriptor.
#include "zero/offload/swap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "cohort/error.h"
#include "core/check.h"
#include "core/log.h"
#include "zero/offload/aligned_buffer.h"

namespace cohort::detail {
namespace {

std::atomic<int64_t> swap_file_counter{0};

void check_writable_directory(const std::string& directory, const std::string& key, int rank) {
  struct stat info {};
  COHORT_CHECK_KIND(kInvalidArgument, !directory.empty(), key, " is empty: give a directory on a local disk (rank ",
                    rank, ")");
  COHORT_CHECK_KIND(kInvalidArgument, ::stat(directory.c_str(), &info) == 0, key, " \"", directory,
                    "\" does not exist (rank ", rank, "): ", std::strerror(errno));
  COHORT_CHECK_KIND(kInvalidArgument, S_ISDIR(info.st_mode), key, " \"", directory, "\" is not a directory (rank ",
                    rank, ")");
  COHORT_CHECK_KIND(kInvalidArgument, ::access(directory.c_str(), W_OK | X_OK) == 0, key, " \"", directory,
                    "\" is not a writable directory (rank ", rank, "): ", std::strerror(errno));
}

// Opens a new file at `path`: O_DIRECT where the filesystem takes it, else buffered. -1 (errno set)
// when the name exists or the open fails otherwise.
int open_new(const std::string& path, bool& direct) {
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  direct = true;
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {  // tmpfs and a few others refuse O_DIRECT
    direct = false;
    fd = ::open(path.c_str(), flags, 0600);
  }
  return fd;
}

}  // namespace

SwapFile::SwapFile(const std::string& directory, const std::string& key, const std::string& what, int rank,
                   int64_t bytes)
    : rank_(rank), key_(key), bytes_(round_up_to_alignment(bytes)) {
  check_writable_directory(directory, key, rank);
  for (int attempt = 0; fd_ < 0; ++attempt) {
    path_ = directory + "/cohort-" + what + "-rank" + std::to_string(rank) + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(swap_file_counter++) + ".swap";
    fd_ = open_new(path_, direct_);
    COHORT_CHECK_KIND(kIO, fd_ >= 0 || (errno == EEXIST && attempt < 100), "could not create the swap file ", path_,
                      " under ", key, " (rank ", rank, "): ", std::strerror(errno));
  }
  // Nothing is left behind however the process ends (SIGKILL, a crash, a launcher's restart): the
  // kernel frees the space when the last descriptor closes.
  ::unlink(path_.c_str());
  const int failed = bytes_ > 0 ? ::posix_fallocate(fd_, 0, bytes_) : 0;
  if (failed != 0) {
    ::close(fd_);
    COHORT_CHECK_KIND(kIO, false, "could not reserve ", bytes_, " bytes for the swap file ", path_, " under ", key,
                      " (rank ", rank, "): ", std::strerror(failed));
  }
  if (!direct_)
    COHORT_WARN(key, " \"", directory,
                "\" does not take direct I/O (tmpfs?): the swapped bytes stay in the page "
                "cache, so this offload saves no memory; give a directory on a disk");
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t SwapFile::grow(int64_t more) {
  const int64_t begin = bytes_;
  const int64_t added = round_up_to_alignment(more);
  const int failed = added > 0 ? ::posix_fallocate(fd_, begin, added) : 0;
  if (failed != 0) {
    (void)!::ftruncate(fd_, begin);  // give back what a partial reservation took
    COHORT_CHECK_KIND(kIO, false, "could not reserve ", added, " more bytes for the swap file ", path_, " under ", key_,
                      " (rank ", rank_, "; it holds ", begin, "): ", std::strerror(failed));
  }
  bytes_ += added;
  return begin;
}

void SwapFile::check_intact() const {
  struct stat info {};
  COHORT_CHECK_KIND(kIO, ::fstat(fd_, &info) == 0, "the swap file ", path_, " (rank ", rank_,
                    ") cannot be read: ", std::strerror(errno));
  COHORT_CHECK_KIND(kIO, info.st_size >= bytes_, "the swap file ", path_, " (rank ", rank_, ") was cut to ",
                    info.st_size, " bytes while the job ran (it had ", bytes_, ")");
}

}  // namespace cohort::detail
