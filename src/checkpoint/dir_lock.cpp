// The checkpoint directory's lock (see dir_lock.h).
#include "checkpoint/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "cohort/error.h"
#include "core/check.h"

namespace cohort::detail::ckpt {
namespace {

// What the holder wrote into the lock file, "<host> <pid>", as "host H, pid P"; bounded and printable
// (the file is anyone's to write).
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string host = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
  for (char& c : host)
    if (c < 32 || c > 126) c = ' ';
  const size_t space = host.find(' ');
  if (space == std::string::npos || space == 0) return "an unknown process";
  std::string pid = host.substr(space + 1);
  pid = pid.substr(0, pid.find(' '));
  return "host " + host.substr(0, space) + ", pid " + pid;
}

// Whether `fd` is still the lock file at `path` (a directory removed and made again has a new one).
bool still_there(int fd, const std::string& path) {
  struct stat open_file {
  }, named{};
  return ::fstat(fd, &open_file) == 0 && ::stat(path.c_str(), &named) == 0 && open_file.st_dev == named.st_dev &&
         open_file.st_ino == named.st_ino;
}

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  return std::string(host) + " " + std::to_string(::getpid()) + "\n";
}

}  // namespace

void hold_directory_lock(const std::string& root) {
  static std::mutex mutex;
  // Canonical directory -> (this process's pid, the open lock file, kept to the end). A child made by
  // fork() inherits the map but not the job: it must take the lock itself, and is refused while its
  // parent holds it.
  static std::map<std::string, std::pair<pid_t, int>> held;
  std::error_code error;
  const std::string key = std::filesystem::weakly_canonical(root, error).string();
  const std::string path = root + "/.lock";
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto found = held.find(key); found != held.end()) {
    const auto [owner, held_fd] = found->second;
    if (owner == ::getpid() && still_there(held_fd, path)) return;
    if (owner == ::getpid()) ::close(held_fd);  // a child leaves its parent's descriptor open
    held.erase(found);
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  COHORT_CHECK_KIND(kIO, fd >= 0, "checkpoint directory ", root, ": cannot open its lock file ", path, ": ",
                    std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    const std::string holder = holder_of(fd);
    ::close(fd);
    COHORT_CHECK_KIND(kIO, why == EWOULDBLOCK, "checkpoint directory ", root, ": cannot lock ", path, ": ",
                      std::strerror(why));
    COHORT_CHECK_KIND(kInvalidArgument, false, "checkpoint directory ", root, " is in use by another job (", holder,
                      " holds ", path, "): give this job a directory of its own, or stop the other one");
  }
  const std::string me = this_process();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int why = errno;
    ::close(fd);
    COHORT_CHECK_KIND(kIO, false, "checkpoint directory ", root, ": cannot write its lock file ", path, ": ",
                      std::strerror(why));
  }
  held[key] = {::getpid(), fd};
}

}  // namespace cohort::detail::ckpt
