// open_regular_file and read_regular_file (see file_read.h).
#include "core/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::detail {

const char* odd_file_type(mode_t mode) {
  if (S_ISREG(mode)) return nullptr;
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a fifo";
  return "not a regular file";
}

int open_regular_file(const std::string& path, const std::string& source) {
  // O_NONBLOCK: opening a fifo for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error(source + ": cannot open: " + std::strerror(errno), ErrorKind::kIO);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error(source + ": cannot read: " + std::strerror(error), ErrorKind::kIO);
  }
  if (const char* type = odd_file_type(info.st_mode)) {
    ::close(fd);
    throw Error(source + ": it is " + type + ", not a regular file", ErrorKind::kIO);
  }
  (void)::fcntl(fd, F_SETFL, 0);  // back to blocking reads
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& source, int64_t max_bytes) {
  const int fd = open_regular_file(path, source);
  struct stat info {};
  ::fstat(fd, &info);
  if (info.st_size > max_bytes) {
    ::close(fd);
    throw Error(source + ": it has " + std::to_string(info.st_size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " accepted",
                ErrorKind::kIO);
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  int error = 0;
  while (done < text.size()) {  // never past the size seen: a file that grows meanwhile is cut there
    const ssize_t n = ::read(fd, &text[done], text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (error != 0) throw Error(source + ": cannot read: " + std::strerror(error), ErrorKind::kIO);
  text.resize(done);  // it shrank meanwhile: what was there
  return text;
}

}  // namespace cohort::detail
