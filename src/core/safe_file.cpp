// Safe writes and own-file reads (see safe_file.h). The temporary's name is random (getrandom) and it
// is created with O_EXCL|O_NOFOLLOW, so a file or link planted under any name an attacker can guess
// makes the open fail instead of being written through; the target is checked with lstat before the
// temporary is made and again just before the rename (rename replaces a link, never follows it).
#include "core/safe_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cohort/error.h"
#include "core/check.h"
#include "core/file_read.h"

namespace cohort::detail {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Six characters from [A-Za-z0-9], from the kernel's random source.
std::string random_suffix() {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[6];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, "cannot read random bytes for a temporary file name: ", errno_text(errno));
    got += size_t(n);
  }
  std::string out;
  for (unsigned char b : bytes) out += kAlphabet[b % (sizeof kAlphabet - 1)];
  return out;
}

}  // namespace

void check_replaceable(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    COHORT_CHECK_KIND(kIO, errno == ENOENT, "cannot write ", path, ": ", errno_text(errno));
    return;  // nothing there yet
  }
  if (S_ISLNK(info.st_mode)) {
    throw Error(path +
                    " is a symbolic link: cohort does not write through links (remove it, or name the file "
                    "itself)",
                ErrorKind::kIO);
  }
  const char* type = odd_file_type(info.st_mode);
  COHORT_CHECK_KIND(kIO, type == nullptr, path, " is ", type, ", not a regular file: cohort writes regular files only");
}

SafeFile::SafeFile(std::string target) : target_(std::move(target)) {
  check_replaceable(target_);
  const std::string dir = directory_of(target_);
  const std::string base = target_.substr(target_.find_last_of('/') + 1);
  COHORT_CHECK_KIND(kInvalidArgument, !base.empty(), "cannot write ", target_, ": it names a directory, not a file");
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = dir + "/." + base + "." + random_suffix() + ".tmp";
    fd_ = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      temporary_ = name;
      return;
    }
    if (errno != EEXIST) break;  // EEXIST: that name is taken (by anything, a link included); draw again
  }
  throw Error("cannot create a temporary file in " + dir + " to write " + target_ + ": " + errno_text(errno),
              ErrorKind::kIO);
}

SafeFile::~SafeFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());  // uncommitted: nothing is left behind
}

void SafeFile::write(const void* data, size_t bytes) {
  COHORT_CHECK_KIND(kInternal, fd_ >= 0, "cannot write ", target_, ": the file is already committed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, "cannot write ", target_, ": ", errno_text(n < 0 ? errno : ENOSPC));
    p += n;
    bytes -= size_t(n);
  }
}

void SafeFile::write_at(const void* data, size_t bytes, int64_t offset) {
  COHORT_CHECK_KIND(kInternal, fd_ >= 0, "cannot write ", target_, ": the file is already committed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, n > 0, "cannot write ", target_, ": ", errno_text(n < 0 ? errno : ENOSPC));
    p += n;
    offset += n;
    bytes -= size_t(n);
  }
}

void SafeFile::commit() {
  COHORT_CHECK_KIND(kInternal, fd_ >= 0, "cannot write ", target_, ": the file is already committed");
  COHORT_CHECK_KIND(kIO, ::fsync(fd_) == 0, "cannot flush ", target_, " to disk: ", errno_text(errno));
  const int closed = ::close(fd_);  // NFS reports a failed write-back here
  fd_ = -1;
  COHORT_CHECK_KIND(kIO, closed == 0, "cannot write ", target_, ": ", errno_text(errno));
  check_replaceable(target_);  // again: something may have been put there meanwhile
  COHORT_CHECK_KIND(kIO, ::rename(temporary_.c_str(), target_.c_str()) == 0, "cannot rename ", temporary_, " to ",
                    target_, ": ", errno_text(errno));
  temporary_.clear();
  // The rename survives a power loss once the directory is on disk (best effort: some filesystems
  // refuse to open directories).
  const int dir = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_safely(const std::string& path, const std::string& text) {
  SafeFile file(path);
  file.write(text);
  file.commit();
}

int open_own_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a fifo for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    struct stat info {};
    const bool link = error == ELOOP && ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode);
    COHORT_CHECK_KIND(kIO, !link, what, " ", path,
                      " is a symbolic link: cohort reads its own files only, never through a link");
    throw Error(what + " " + path + " cannot be opened: " + errno_text(error), ErrorKind::kIO);
  }
  struct stat info {};
  const bool stated = ::fstat(fd, &info) == 0;
  const char* type = stated ? odd_file_type(info.st_mode) : "unreadable";
  if (type != nullptr) {
    ::close(fd);
    throw Error(what + " " + path + " is " + type + ", not a regular file", ErrorKind::kIO);
  }
  (void)::fcntl(fd, F_SETFL, 0);  // back to blocking reads
  return fd;
}

std::string read_own_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  const int fd = open_own_file(path, what);
  struct stat info {};
  ::fstat(fd, &info);
  if (info.st_size > max_bytes) {
    ::close(fd);
    throw Error(what + " " + path + " has " + std::to_string(info.st_size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " it may hold",
                ErrorKind::kIO);
  }
  std::string text(size_t(info.st_size), '\0');
  size_t done = 0;
  int error = 0;
  while (done < text.size()) {  // never past the size seen: a file that grows meanwhile is cut there
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  COHORT_CHECK_KIND(kIO, error == 0, "cannot read ", what, " ", path, ": ", errno_text(error));
  text.resize(done);  // it shrank meanwhile: what was there
  return text;
}

void remove_stale_temporaries(const std::string& path) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string prefix = "." + target.filename().string() + ".";
  std::error_code error;
  for (const auto& item : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = item.path().filename().string();
    const bool ours = name.size() > prefix.size() + 4 && name.rfind(prefix, 0) == 0 &&
                      name.compare(name.size() - 4, 4, ".tmp") == 0;
    std::error_code kind;
    if (ours && item.is_regular_file(kind) && !item.is_symlink(kind)) std::filesystem::remove(item.path(), kind);
  }
}

}  // namespace cohort::detail
