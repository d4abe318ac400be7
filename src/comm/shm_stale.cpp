// Removing stale cohort segments from /dev/shm (see shm_stale.h).
#include "comm/shm_stale.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace cohort::detail {
namespace {

// The pid in "cohort-<pid>-<16 hex digits>", or 0 when the name is not cohort's.
pid_t owner_pid(const std::string& name) {
  const std::string prefix = "cohort-";
  if (name.compare(0, prefix.size(), prefix) != 0) return 0;
  const size_t dash = name.find('-', prefix.size());
  if (dash == std::string::npos || dash == prefix.size() || name.size() - dash - 1 != 16) return 0;
  const std::string pid = name.substr(prefix.size(), dash - prefix.size());
  if (pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) return 0;
  if (name.find_first_not_of("0123456789abcdef", dash + 1) != std::string::npos) return 0;
  return static_cast<pid_t>(std::atol(pid.c_str()));
}

bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// Removes /dev/shm/<name> when it is this user's and no process holds its lock.
bool remove_if_unlocked(const std::string& name) {
  const std::string path = "/" + name;
  const int fd = ::shm_open(path.c_str(), O_RDWR | O_NOFOLLOW, 0600);
  if (fd < 0) return false;  // gone already, or another user's
  struct stat info {};
  const bool mine = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == ::geteuid();
  const bool removed = mine && lock_shm_segment(fd) && ::shm_unlink(path.c_str()) == 0;
  ::close(fd);  // releases the lock
  return removed;
}

}  // namespace

bool lock_shm_segment(int fd) { return ::flock(fd, LOCK_EX | LOCK_NB) == 0; }

std::vector<std::string> remove_stale_shm_segments() {
  std::vector<std::string> removed;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return removed;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) names.push_back(entry->d_name);
  ::closedir(dir);
  for (const std::string& name : names) {
    const pid_t pid = owner_pid(name);
    if (pid > 0 && process_gone(pid) && remove_if_unlocked(name)) removed.push_back("/" + name);
  }
  return removed;
}

}  // namespace cohort::detail
